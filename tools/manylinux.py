"""manylinux wheels without a manylinux container.

    python tools/manylinux.py stubs DIR [--glibc 2.28]    glibc 2.28 stub libraries in DIR (needs `pip install ziglang`)
    KP_GLIBC_STUBS=DIR pip wheel ... packages/kp-norm     link the native module against them
    python tools/manylinux.py check PATH...               what keeps wheels/modules from manylinux_2_28 (exit 1)
    python tools/manylinux.py repair -w OUT WHEEL...      check, then tag them manylinux_2_28_<arch>

`KP_MANYLINUX=2_28 nox -s build` runs all of it (noxfile.py).

How: a wheel's glibc floor is the newest symbol version its modules need. The linker takes those
versions from the libc.so.6 (libpthread.so.0, ...) it links against, so linking against *stub*
libraries that define exactly glibc 2.28's symbols, in 2.28's libraries, gives the module the
symbol versions a build on glibc 2.28 would give it, whatever the build machine's glibc is. Zig
ships every glibc's symbol lists and makes such stubs for any target (`zig cc -target
x86_64-linux-gnu.2.28`); `stubs` takes them (and zig's libc_nonshared.a for that glibc) from a
throwaway zig cache. KpExtension.cmake (KP_GLIBC_STUBS) puts the stub dir first on the link line,
links libstdc++ statically with its symbols hidden (no GLIBCXX_ needs, no interposing on the
process's libstdc++), exports only PyInit_<name> (shared_cuda/cmake/module_exports.map) and adds
shared_cuda/cmake/glibc_compat.cpp: hidden definitions of the two
glibc > 2.28 symbols the build machine's libstdc++.a uses. libgcc_s stays a shared library
(manylinux allows it): the static libgcc_eh.a of gcc 12 needs glibc 2.35's _dl_find_object.

`check` reads the modules' ELF dynamic sections directly (no binutils needed): NEEDED, the symbol
versions needed, undefined symbols with no version (what the stubs could not bind: a glibc
function newer than the stubs' glibc, called from code compiled on the build machine), and what
the module exports (PyInit_<name> only).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import os
import pathlib
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

DEFAULT_GLIBC = "2.28"
# Libraries no kp module may link: torch is found at run time through Python, the CUDA runtime is
# linked statically and the driver is dlopen'ed by it.
FORBIDDEN = re.compile(r"^(libtorch|libc10|libcudart|libcuda\.|libnvrtc|libpython)")
# What a manylinux_2_28 module may link (auditwheel's policy, less libstdc++: we link it statically).
ALLOWED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1",
           "libresolv.so.2", "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
GCC_MAX = (7, 0, 0)  # libgcc_s of manylinux_2_28 (GCC 8): auditwheel's policy
STUB_LIBS = ["libc.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libm.so.6", "libutil.so.1",
             "libresolv.so.2"]


# --- ELF ----------------------------------------------------------------------------------------------
class ElfError(ValueError):
    pass


def read_elf(data: bytes) -> dict:
    """The dynamic linking facts of a 64-bit little-endian ELF shared object: {"needed": [soname...],
    "soname": str|None, "undefined": [(name, version|None, weak)], "exported": [name...] (defined,
    global or weak), "verneed": {file: [version...]}, "verdef": [version...]}."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)

    def strtab(index):
        off, size = sections[index][4], sections[index][5]
        blob = data[off:off + size]
        return lambda o: blob[o:blob.index(b"\0", o)].decode()

    by_type = {}
    for i, s in enumerate(sections):
        by_type.setdefault(s[1], i)
    SHT_DYNSYM, SHT_DYNAMIC, SHT_VERSYM, SHT_VERNEED, SHT_VERDEF = 11, 6, 0x6FFFFFFF, 0x6FFFFFFE, 0x6FFFFFFD
    out = {"needed": [], "soname": None, "undefined": [], "exported": [], "verneed": {}, "verdef": []}
    if SHT_DYNAMIC in by_type:
        s = sections[by_type[SHT_DYNAMIC]]
        name = strtab(s[6])
        for off in range(s[4], s[4] + s[5], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == 0:
                break
            if tag == 1:
                out["needed"].append(name(val))
            elif tag == 14:
                out["soname"] = name(val)
    versions = {}  # version index -> name
    if SHT_VERNEED in by_type:
        s = sections[by_type[SHT_VERNEED]]
        name, off = strtab(s[6]), s[4]
        for _ in range(s[7]):
            _, cnt, file, aux, nxt = struct.unpack_from("<HHIII", data, off)
            a = off + aux
            for _ in range(cnt):
                _, _, other, vname, anext = struct.unpack_from("<IHHII", data, a)
                versions[other] = name(vname)
                out["verneed"].setdefault(name(file), []).append(name(vname))
                a += anext
            off += nxt
    if SHT_VERDEF in by_type:
        s = sections[by_type[SHT_VERDEF]]
        name, off = strtab(s[6]), s[4]
        for _ in range(s[7]):
            _, flags, ndx, cnt, _, aux, nxt = struct.unpack_from("<HHHHIII", data, off)
            vname = name(struct.unpack_from("<I", data, off + aux)[0])
            versions[ndx] = vname
            if not flags & 1:  # VER_FLG_BASE: the file's own name
                out["verdef"].append(vname)
            off += nxt
    if SHT_DYNSYM in by_type:
        s = sections[by_type[SHT_DYNSYM]]
        name = strtab(s[6])
        versym = sections[by_type[SHT_VERSYM]] if SHT_VERSYM in by_type else None
        for i in range(1, s[5] // 24):
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, s[4] + i * 24)
            if not st_name:
                continue
            if st_shndx != 0:
                if st_info >> 4 in (1, 2):  # STB_GLOBAL, STB_WEAK
                    out["exported"].append(name(st_name))
                continue
            ver = struct.unpack_from("<H", data, versym[4] + 2 * i)[0] & 0x7FFF if versym else 0
            out["undefined"].append((name(st_name), versions.get(ver) if ver > 1 else None, st_info >> 4 == 2))
    return out


def _version_tuple(v: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", v))


def problems(elf: dict, glibc: str | None = DEFAULT_GLIBC) -> list:
    """What keeps one module from a wheel for any torch (glibc=None) or from manylinux_<glibc>."""
    out = [f"links {n} (kp modules must not: torch is found through Python, CUDA runtime static)"
           for n in elf["needed"] if FORBIDDEN.match(n)]
    if glibc is None:
        return out
    limit = _version_tuple(glibc)
    out += [f"links {n}, not a manylinux_{glibc.replace('.', '_')} system library"
            for n in elf["needed"] if not FORBIDDEN.match(n) and n not in ALLOWED]
    needs = {}
    for name, ver, _weak in elf["undefined"]:
        if ver:
            needs.setdefault(ver, []).append(name)
    all_versions = sorted({v for vs in elf["verneed"].values() for v in vs},
                          key=lambda v: (v.split("_")[0], _version_tuple(v)))
    cxx = [v for v in all_versions if v.startswith(("GLIBCXX_", "CXXABI_"))]
    if cxx:
        out.append(f"needs {', '.join(cxx)}: libstdc++ linked dynamically")
    for ver in all_versions:
        names = sorted(needs.get(ver, []))
        syms = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        if ver.startswith("GLIBC_") and ver != "GLIBC_PRIVATE" and _version_tuple(ver) > limit:
            out.append(f"needs {ver} > GLIBC_{glibc} ({syms})")
        elif ver == "GLIBC_PRIVATE":
            out.append(f"needs GLIBC_PRIVATE ({syms})")
        elif ver.startswith("GCC_") and _version_tuple(ver) > GCC_MAX:
            out.append(f"needs {ver} ({syms}) > GCC_7.0.0 (libgcc_s of manylinux_2_28)")
    extra = sorted(n for n in elf.get("exported", []) if not n.startswith("PyInit_"))
    if extra:
        out.append(f"exports {len(extra)} symbols besides PyInit_ ({', '.join(extra[:4])}, ...): "
                   "its static libstdc++ and std:: template code must stay its own (module_exports.map)")
    loose = sorted(n for n, ver, weak in elf["undefined"]
                   if ver is None and not weak and not n.startswith(("Py", "_Py")))
    if loose:
        out.append("undefined without a version (no stub defines them: newer than glibc "
                   f"{glibc}? define them in shared_cuda/cmake/glibc_compat.cpp): {', '.join(loose[:12])}")
    return out


def modules(path: pathlib.Path):
    """(name, ELF bytes) of every extension module in a wheel, a folder, or the file itself."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                if re.search(r"\.so(\.\d+)*$", n):
                    yield f"{path.name}:{n}", z.read(n)
    elif path.is_dir():
        for f in sorted(path.rglob("*.so")):
            yield str(f), f.read_bytes()
    else:
        yield str(path), path.read_bytes()


def wheel_glibc(path: pathlib.Path) -> str | None:
    """The glibc a wheel's tag promises (manylinux_2_28_x86_64 -> "2.28"; manylinux2014 -> "2.17"),
    None for a linux_<arch> or pure-Python wheel."""
    legacy = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
    plats = path.stem.split("-")[-1].split(".")
    found = [f"{m[1]}.{m[2]}" for p in plats if (m := re.match(r"manylinux_(\d+)_(\d+)_", p))]
    found += [v for p in plats for k, v in legacy.items() if p.startswith(k + "_")]
    return min(found, key=_version_tuple) if found else None


def check(paths, glibc: str | None = DEFAULT_GLIBC, from_tag: bool = False) -> list:
    """Problems of every module under paths, as "<module>: <problem>". from_tag: a wheel is held
    to the glibc its tag promises (a linux_<arch> wheel only to the no-torch rule)."""
    out = []
    for p in map(pathlib.Path, paths):
        limit = wheel_glibc(p) if from_tag and p.suffix == ".whl" else glibc
        for name, data in modules(p):
            try:
                out += [f"{name}: {x}" for x in problems(read_elf(data), limit)]
            except (ElfError, struct.error, ValueError) as e:
                out.append(f"{name}: cannot read: {e}")
    return out


# --- stubs ----------------------------------------------------------------------------------------------
def _zig_command(zig: str | None) -> list:
    if zig:
        return [zig]
    try:
        import ziglang  # noqa: F401
    except ImportError:
        if shutil.which("zig"):
            return ["zig"]
        raise SystemExit("manylinux stubs: needs zig: `pip install ziglang` (or --zig PATH)")
    return [sys.executable, "-m", "ziglang"]


def make_stubs(out: pathlib.Path, glibc: str = DEFAULT_GLIBC, arch: str | None = None,
               zig: str | None = None) -> pathlib.Path:
    """glibc <glibc> stub libraries in out/, with libc.so (...) linker scripts naming them, so that
    `-L out` makes the linker bind -lc, -lpthread, -ldl, -lrt and -lm to them. Idempotent."""
    arch = arch or platform.machine()
    out = out.resolve()
    if (out / "GLIBC_VERSION").exists() and (out / "GLIBC_VERSION").read_text().split() == [glibc, arch]:
        return out
    with tempfile.TemporaryDirectory(prefix="kp-zig-") as tmp:
        t = pathlib.Path(tmp)
        (t / "a.c").write_text("int kp_stub_probe(void) { return 0; }\n")
        env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=str(t / "cache"), ZIG_LOCAL_CACHE_DIR=str(t / "cache"))
        cmd = _zig_command(zig) + ["cc", "-target", f"{arch}-linux-gnu.{glibc}", "-shared", "-O2",
                                   "-fno-sanitize=all", "-o", str(t / "a.so"), str(t / "a.c")]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"manylinux stubs: {' '.join(cmd)} failed:\n{r.stderr}")
        libc = list((t / "cache").rglob("libc.so.6"))
        nonshared = list((t / "cache").rglob("libc_nonshared.a"))
        if len(libc) != 1 or len(nonshared) != 1:
            raise SystemExit(f"manylinux stubs: zig's cache does not hold one libc.so.6 and one "
                             f"libc_nonshared.a ({libc}, {nonshared}): a zig with another cache layout?")
        src = libc[0].parent
        defined = read_elf(libc[0].read_bytes())["verdef"]
        newest = max((v for v in defined if v.startswith("GLIBC_2")), key=_version_tuple)
        if newest != f"GLIBC_{glibc}":
            raise SystemExit(f"manylinux stubs: zig's libc.so.6 defines up to {newest}, not GLIBC_{glibc}")
        out.mkdir(parents=True, exist_ok=True)
        for lib in STUB_LIBS:
            shutil.copyfile(src / lib, out / lib)
        loader = read_elf((src / "libld.so.2").read_bytes())["soname"]  # ld-linux-x86-64.so.2
        shutil.copyfile(src / "libld.so.2", out / loader)
        shutil.copyfile(nonshared[0], out / "libc_nonshared.a")
    # What -lc ... find first: linker scripts, like the system's libc.so.
    (out / "libc.so").write_text(
        f"/* glibc {glibc} stubs (tools/manylinux.py) */\n"
        f"GROUP ( {out}/libc.so.6 {out}/libc_nonshared.a AS_NEEDED ( {out}/{loader} ) )\n")
    for lib in STUB_LIBS[1:]:
        (out / lib.split(".so")[0]).with_suffix(".so").write_text(f"GROUP ( {out}/{lib} )\n")
    (out / "GLIBC_VERSION").write_text(f"{glibc} {arch}\n")
    return out


# --- wheels -----------------------------------------------------------------------------------------------
def retag(wheel: pathlib.Path, plat: str, outdir: pathlib.Path) -> pathlib.Path:
    """A copy of the wheel in outdir with platform tag plat (file name, WHEEL's Tag lines, RECORD).
    What `auditwheel repair` does to a wheel that has nothing to graft, without needing patchelf."""
    parts = wheel.stem.split("-")
    old_plats = parts[-1].split(".")
    parts[-1] = plat
    target = outdir / ("-".join(parts) + ".whl")
    with zipfile.ZipFile(wheel) as src:
        names = src.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        meta = record[: -len("RECORD")] + "WHEEL"
        lines, seen = [], set()
        for line in src.read(meta).decode().splitlines():
            if line.startswith("Tag: "):
                interp_abi = line[5:].rsplit("-", 1)[0]
                if line[5:].rsplit("-", 1)[1] in old_plats and interp_abi not in seen:
                    seen.add(interp_abi)
                    lines.append(f"Tag: {interp_abi}-{plat}")
                continue
            lines.append(line)
        wheel_meta = ("\n".join(lines) + "\n").encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(wheel_meta).digest()).rstrip(b"=").decode()
        rec = [f"{meta},sha256={digest},{len(wheel_meta)}" if l.split(",")[0] == meta else l
               for l in src.read(record).decode().splitlines()]
        tmp = target.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                data = wheel_meta if info.filename == meta else (
                    ("\n".join(rec) + "\n").encode() if info.filename == record else src.read(info))
                dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(target)
    return target


def repair(wheels, outdir: pathlib.Path, glibc: str = DEFAULT_GLIBC) -> list:
    """Check each wheel, then tag it manylinux_<glibc>_<arch>: its modules link only system
    libraries, so there is nothing to graft. Pure-Python wheels are copied as they are."""
    outdir.mkdir(parents=True, exist_ok=True)
    made = []
    for w in map(pathlib.Path, wheels):
        if not any(True for _ in modules(w)):
            if w.resolve() != (outdir / w.name).resolve():
                shutil.copyfile(w, outdir / w.name)
            made.append(outdir / w.name)
            continue
        bad = check([w], glibc)
        if bad:
            head = f"{w.name} is not manylinux_{glibc.replace('.', '_')}:"
            raise SystemExit("manylinux repair: " + "\n  ".join([head] + bad))
        plat = w.stem.split("-")[-1]
        if not plat.startswith("linux_"):
            raise SystemExit(f"manylinux repair: {w.name}: want a linux_<arch> wheel, not {plat}")
        made.append(retag(w, f"manylinux_{glibc.replace('.', '_')}_{plat[len('linux_'):]}", outdir))
    return made


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stubs", help="glibc stub libraries (and linker scripts) in DIR")
    s.add_argument("dir", type=pathlib.Path)
    s.add_argument("--glibc", default=DEFAULT_GLIBC)
    s.add_argument("--arch", default=None)
    s.add_argument("--zig", default=None, help="zig executable (default: the ziglang package, else zig on PATH)")
    c = sub.add_parser("check", help="problems of wheels / modules / folders of modules")
    c.add_argument("paths", nargs="+")
    c.add_argument("--glibc", default=DEFAULT_GLIBC, help="held to this glibc; 'tag': a wheel's own tag")
    r = sub.add_parser("repair", help="check, then tag the wheels manylinux_<glibc>_<arch> (into -w DIR)")
    r.add_argument("wheels", nargs="+")
    r.add_argument("-w", "--wheel-dir", type=pathlib.Path, required=True)
    r.add_argument("--glibc", default=DEFAULT_GLIBC)
    a = ap.parse_args(argv)
    if a.cmd == "stubs":
        print(make_stubs(a.dir, a.glibc, a.arch, a.zig))
    elif a.cmd == "check":
        bad = check(a.paths, None if a.glibc == "tag" else a.glibc, from_tag=a.glibc == "tag")
        print("\n".join(bad) if bad else f"manylinux check: ok ({len(a.paths)} path(s))")
        return 1 if bad else 0
    else:
        for w in repair(a.wheels, a.wheel_dir, a.glibc):
            print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
