"""A PEP 517 build backend in the standard library, so that
``pip install clients/python`` works with nothing to download.

setuptools would do the job where PyPI is reachable, but a build with it
needs setuptools and wheel in the build environment; offline, or on a Python
whose setuptools has no bdist_wheel, the install fails before it starts.
This package has no compiled parts and no dependencies, so a wheel is a zip
of the package with its metadata, built here. The metadata comes from the
[project] table of pyproject.toml.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "countersign"


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read().decode("utf-8")
    try:
        import tomllib  # Python 3.11+

        return tomllib.loads(data)["project"]
    except ImportError:
        # Python 3.10: the [project] table holds only strings, lists of
        # strings and one-line inline tables of strings.
        table = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", data, re.S | re.M).group(1)
        out: dict = {}
        for key, value in re.findall(r"^([A-Za-z_-]+)\s*=\s*(.+)$", table, re.M):
            if value.startswith("["):
                out[key] = re.findall(r'"([^"]*)"', value)
            elif value.startswith("{"):
                out[key] = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', value))
            else:
                out[key] = value.strip().strip('"')
        return out


def _metadata() -> tuple[str, str, str]:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p.get('requires-python', '')}"]
    if isinstance(p.get("license"), dict) and p["license"].get("text"):
        lines.append(f"License: {p['license']['text']}")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    text = "\n".join(lines) + "\n"
    readme = p.get("readme")
    if readme:
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            text += "Description-Content-Type: text/markdown\n\n" + f.read()
    return p["name"], p["version"], text


def _package_files() -> list[str]:
    files = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                files.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return files


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, contents: dict[str, bytes]) -> str:
    name, version, metadata = _metadata()
    dist_info = f"{name}-{version}.dist-info"
    contents = dict(contents)
    contents[f"{dist_info}/METADATA"] = metadata.encode("utf-8")
    contents[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: countersign build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ).encode()
    record = [_record_line(p, d) for p, d in contents.items()] + [f"{dist_info}/RECORD,,"]
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in contents.items():
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    contents = {}
    for rel in _package_files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            contents[rel.replace(os.sep, "/")] = f.read()
    return _write_wheel(wheel_directory, contents)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # PEP 660: a .pth file that puts this directory on sys.path.
    return _write_wheel(wheel_directory, {f"_{PACKAGE}_editable.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    name, version, metadata = _metadata()
    base = f"{name}-{version}"
    filename = f"{base}.tar.gz"
    files = _package_files() + ["pyproject.toml", "build_backend.py", "README.md"]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in files:
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = metadata.encode("utf-8")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return filename
