"""cocotb 2.x testbenches and the runner glue that builds and runs them."""
