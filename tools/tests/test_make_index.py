"""tools/make_index.py: the PEP 503 layout pip reads, with hashes, for wheels and sdists."""
import hashlib
import pathlib
import re
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import make_index  # noqa: E402


def test_index_layout_and_hashes(tmp_path):
    dist = tmp_path / "dist"
    dist.mkdir()
    files = {
        "kp_core-0.3.0-py3-none-any.whl": b"core",
        "kp_norm-0.3.1-cp312-cp312-manylinux_2_28_x86_64.whl": b"norm312",
        "kp_norm-0.3.1.tar.gz": b"sdist",
        "kp_fused_mlp-0.1.0-cp311-cp311-linux_x86_64.whl": b"mlp",
        "notes.txt": b"ignored",
    }
    for name, data in files.items():
        (dist / name).write_bytes(data)
    root = make_index.build_index(dist, tmp_path / "index", "cu130")
    assert sorted(p.name for p in root.iterdir()) == ["index.html", "kp-core", "kp-fused-mlp", "kp-norm"]
    assert re.findall(r'href="([^"]+)"', (root / "index.html").read_text()) == ["kp-core/", "kp-fused-mlp/", "kp-norm/"]
    page = (root / "kp-norm" / "index.html").read_text()
    links = dict(re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page))
    assert set(links) == {"kp_norm-0.3.1-cp312-cp312-manylinux_2_28_x86_64.whl", "kp_norm-0.3.1.tar.gz"}
    for name, digest in links.items():
        assert digest == hashlib.sha256(files[name]).hexdigest()
        assert (root / "kp-norm" / name).read_bytes() == files[name]


def test_names_are_normalized():
    assert make_index.project_of("kp_fused_mlp-0.1.0-cp311-cp311-linux_x86_64.whl") == "kp-fused-mlp"
    assert make_index.project_of("kp_norm-0.3.1.tar.gz") == "kp-norm"


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no wheels or sdists"):
        make_index.build_index(tmp_path, tmp_path / "index", "cu130")
    with pytest.raises(SystemExit, match="--variant must look like"):
        make_index.main([str(tmp_path), "--variant", "cuda13"])


def test_variant_folder_names_the_variant(tmp_path):
    """`nox -s build` writes dist/<variant>/: `make_index.py dist/cu135` indexes it in dist/index/cu135."""
    for variant in ["cu130", "cu135"]:
        (tmp_path / "dist" / variant).mkdir(parents=True)
        (tmp_path / "dist" / variant / "kp_core-0.3.0-py3-none-any.whl").write_bytes(b"core")
        assert make_index.main([str(tmp_path / "dist" / variant)]) == 0
    assert sorted(p.name for p in (tmp_path / "dist" / "index").iterdir()) == ["cu130", "cu135"]
    assert (tmp_path / "dist" / "index" / "cu135" / "kp-core" / "kp_core-0.3.0-py3-none-any.whl").exists()
    # any other folder: --variant (default cu130), the index inside it
    assert make_index.main([str(tmp_path / "dist" / "cu130"), "--variant", "cu128", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "cu128" / "index.html").exists()
