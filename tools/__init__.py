"""The ``superfabric`` command line and the scripts that set the project up."""
