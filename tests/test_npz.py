"""``tools/npz.py``: the archive it writes by hand reads back, through zipfile and
``np.load``, as numpy's own ``savez_compressed`` does, whatever the arrays and however
the members are cut into pieces."""

import zipfile

import numpy as np
import pytest

from superfabric.tools import npz

rng = np.random.default_rng(7)
ARRAYS = {
    "tag": rng.permutation(50_000).astype(np.int64),
    "dropped": rng.random(30_000) < 0.1,
    "path": rng.integers(-1, 2_000, (20_000, 11), dtype=np.int16),
    "fortran": np.asfortranarray(rng.random((300, 70))),
    "scalar": np.float32(2.5),
    "empty": np.zeros((0, 3), np.int8),
    "record": np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
}


@pytest.mark.parametrize("piece", [npz.PIECE, 4096, 77])
def test_reads_back_as_numpy_writes(tmp_path, monkeypatch, piece):
    # Small pieces cut every member, and its header, many times over.
    monkeypatch.setattr(npz, "PIECE", piece)
    ours, numpys = tmp_path / "ours.npz", tmp_path / "numpy.npz"
    npz.save_compressed(ours, **ARRAYS)
    np.savez_compressed(numpys, **ARRAYS)
    with zipfile.ZipFile(ours) as archive:
        assert archive.testzip() is None                 # every member's CRC holds
        assert [i.filename for i in archive.infolist()] == [k + ".npy" for k in ARRAYS]
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
        with zipfile.ZipFile(numpys) as reference:
            for name in archive.namelist():
                assert archive.read(name) == reference.read(name), name
    with np.load(ours) as got:
        for name, want in ARRAYS.items():
            assert got[name].dtype == np.asarray(want).dtype, name
            assert got[name].shape == np.shape(want), name
            assert np.array_equal(got[name], want), name


def test_object_arrays_are_refused(tmp_path):
    with pytest.raises(ValueError, match="ragged: an object array"):
        npz.save_compressed(tmp_path / "x.npz", ragged=np.array([[1], [2, 3]], dtype=object))
