"""tools/manylinux.py: the manylinux rules, the ELF reader, the retagging, and the built wheels.

The wheels under dist/ (what `nox -s build` made) are checked when there are any: every native
module free of libtorch/libc10/libcudart, and one in a manylinux-tagged wheel within its tag (no
glibc symbol version newer than the tag's, no libstdc++). KP_MANYLINUX_CHECK=<path>[:<path>...]
(wheels, modules or folders of modules) names more, held to manylinux_2_28 whatever their tag.
"""
import base64
import hashlib
import importlib
import os
import pathlib
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import manylinux  # noqa: E402


def _elf(needed=("libc.so.6",), undefined=(), verneed=None, exported=("PyInit__C",)):
    verneed = verneed if verneed is not None else {"libc.so.6": sorted({v for _, v, _ in undefined if v})}
    return {"needed": list(needed), "soname": None, "undefined": list(undefined), "exported": list(exported),
            "verneed": verneed, "verdef": []}


def test_a_clean_module_passes():
    elf = _elf(needed=["libpthread.so.0", "libdl.so.2", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"],
               undefined=[("pthread_once", "GLIBC_2.2.5", False), ("fcntl64", "GLIBC_2.28", False),
                          ("_Unwind_Resume", "GCC_3.0", False), ("PyLong_AsLong", None, False),
                          ("__gmon_start__", None, True)])
    assert manylinux.problems(elf) == []


def test_what_keeps_a_module_from_manylinux_2_28():
    elf = _elf(needed=["libstdc++.so.6", "libc.so.6", "libtorch.so"],
               undefined=[("dlopen", "GLIBC_2.34", False), ("_ZSt9terminatev", "GLIBCXX_3.4", False),
                          ("arc4random", None, False), ("PyErr_Occurred", None, False)],
               verneed={"libc.so.6": ["GLIBC_2.34"], "libstdc++.so.6": ["GLIBCXX_3.4"]},
               exported=["PyInit__C", "_ZNSt7__cxx119to_stringEl"])
    text = "\n".join(manylinux.problems(elf))
    assert "links libtorch.so" in text
    assert "links libstdc++.so.6, not a manylinux_2_28 system library" in text
    assert "needs GLIBC_2.34 > GLIBC_2.28 (dlopen)" in text
    assert "GLIBCXX_3.4: libstdc++ linked dynamically" in text
    assert "undefined without a version" in text and "arc4random" in text and "PyErr" not in text
    assert "exports 1 symbols besides PyInit_ (_ZNSt7__cxx119to_stringEl" in text
    # A plain (linux_x86_64) wheel is only held to the no-torch rule.
    assert manylinux.problems(elf, glibc=None) == ["links libtorch.so (kp modules must not: torch is found "
                                                   "through Python, CUDA runtime static)"]
    for lib in ("libc10.so", "libcudart.so.13", "libc10_cuda.so"):
        assert manylinux.problems(_elf(needed=[lib]), glibc=None)


def test_glibc_of_a_wheel_tag():
    assert manylinux.wheel_glibc(pathlib.Path("kp_norm-0.3.3-cp312-cp312-manylinux_2_28_x86_64.whl")) == "2.28"
    assert manylinux.wheel_glibc(pathlib.Path("x-1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")) == "2.17"
    assert manylinux.wheel_glibc(pathlib.Path("kp_norm-0.3.3-cp312-cp312-linux_x86_64.whl")) is None
    assert manylinux.wheel_glibc(pathlib.Path("kp_core-0.3.1-py3-none-any.whl")) is None


def _some_extension_module():
    """A compiled extension module of this Python (an ELF file with glibc and Py* imports)."""
    for name in ("_struct", "math", "_json", "_ctypes", "select", "array"):
        try:
            f = getattr(importlib.import_module(name), "__file__", None)
        except ImportError:
            continue
        if f and f.endswith(".so") and pathlib.Path(f).read_bytes()[:4] == b"\x7fELF":
            return pathlib.Path(f)
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF modules: Linux only")
def test_the_elf_reader_on_a_real_module():
    path = _some_extension_module()
    if path is None:
        pytest.skip("this Python has no shared extension modules to read")
    elf = manylinux.read_elf(path.read_bytes())
    names = {n for n, _, _ in elf["undefined"]}
    assert any(n.startswith("Py") for n in names), "an extension module calls the Python C API"
    assert any(n.startswith("PyInit_") for n in elf["exported"])
    versions = {v for _, v, _ in elf["undefined"] if v}
    assert versions <= {v for vs in elf["verneed"].values() for v in vs}
    if any(lib.startswith("libc.so") for lib in elf["needed"]):
        assert any(v.startswith("GLIBC_") for v in versions)
    with pytest.raises(manylinux.ElfError):
        manylinux.read_elf(b"#!/bin/sh\n")


def test_retag_rewrites_name_tag_and_record(tmp_path):
    wheel = tmp_path / "kp_demo-0.1.0-cp312-cp312-linux_x86_64.whl"
    meta = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp312-cp312-linux_x86_64\n"
    files = {"kp_demo/__init__.py": b"x = 1\n", "kp_demo-0.1.0.dist-info/WHEEL": meta}

    def digest(b):
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
    record = "".join(f"{n},{digest(b)},{len(b)}\n" for n, b in files.items()) + "kp_demo-0.1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr("kp_demo-0.1.0.dist-info/RECORD", record)
    (tmp_path / "out").mkdir()
    out = manylinux.retag(wheel, "manylinux_2_28_x86_64", tmp_path / "out")
    assert out.name == "kp_demo-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(out) as z:
        new_meta = z.read("kp_demo-0.1.0.dist-info/WHEEL")
        assert new_meta.decode().splitlines()[-1] == "Tag: cp312-cp312-manylinux_2_28_x86_64"
        rows = {r.split(",")[0]: r for r in z.read("kp_demo-0.1.0.dist-info/RECORD").decode().splitlines()}
        assert rows["kp_demo-0.1.0.dist-info/WHEEL"] == f"kp_demo-0.1.0.dist-info/WHEEL,{digest(new_meta)},{len(new_meta)}"
        assert z.read("kp_demo/__init__.py") == b"x = 1\n"


# --- the wheels that were built ---------------------------------------------------------------------------
def _built():
    found = [(p, True) for p in sorted((ROOT / "dist").rglob("*.whl"))
             if ".linux" not in p.parts and any(True for _ in manylinux.modules(p))]
    given = [p for p in os.environ.get("KP_MANYLINUX_CHECK", "").split(os.pathsep) if p]
    return found + [(pathlib.Path(p), False) for p in given]


@pytest.mark.parametrize("path,by_tag", _built() or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no wheel with a native module under dist/ and no KP_MANYLINUX_CHECK: nothing built to check"))],
    ids=lambda v: v.name if isinstance(v, pathlib.Path) else ("tag" if v else "2.28") if isinstance(v, bool) else None)
def test_built_modules(path, by_tag):
    assert path.exists(), f"{path}: no such file"
    assert manylinux.check([path], glibc=None if by_tag else manylinux.DEFAULT_GLIBC, from_tag=by_tag) == []
