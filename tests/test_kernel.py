"""The model's compiled kernels are cached under a digest of every source they compile in."""

import os
import shutil

import numba

from superfabric.sim import kernel


def test_the_cache_follows_every_kernel_source(tmp_path, monkeypatch):
    # The directory in use is the digest's, unless the user named one.
    if not os.environ.get("NUMBA_CACHE_DIR"):
        assert numba.config.CACHE_DIR == str(kernel.cache_dir())
    copies = []
    for folder in kernel._KERNEL_SOURCES:
        copy = tmp_path / folder.name
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("__pycache__"))
        copies.append(copy)
    monkeypatch.setattr(kernel, "_KERNEL_SOURCES", tuple(copies))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    before = kernel.cache_dir()
    assert before.parent == tmp_path / "cache" / "superfabric" / "numba"
    assert kernel.cache_dir() == before
    # An edit of a rule that a kernel calls from another file (the routing function,
    # compiled into the fabric's run loop) moves the cache, not only an edit of the
    # kernel's own file, which is all numba checks.
    routing = copies[2] / "routing.py"
    routing.write_text(routing.read_text() + "\n# edited\n")
    assert kernel.cache_dir() != before
