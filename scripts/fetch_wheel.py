#!/usr/bin/env python3
"""Unpacks part of a pinned PyPI wheel into a folder: the libraries that Debian 12 does not
package (or packages too old) and that PyPI carries as wheels.

    fetch_wheel.py URL SHA256 PREFIX DEST [NAME ...]

Downloads URL, checks its SHA-256, and writes the wheel's files under PREFIX (a folder inside
the wheel) to DEST, PREFIX stripped; with NAMEs, only those files of PREFIX. DEST appears
whole or not at all: it is written beside itself first and renamed.
"""
import hashlib
import io
import os
import shutil
import sys
import urllib.request
import zipfile


def main():
    url, sha256, prefix, dest, *names = sys.argv[1:]
    data = urllib.request.urlopen(url, timeout=600).read()
    if hashlib.sha256(data).hexdigest() != sha256:
        sys.exit(f"fetch_wheel: {url} does not match its SHA-256")
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    written = 0
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        for info in wheel.infolist():
            rel = info.filename[len(prefix):]
            if not info.filename.startswith(prefix) or info.is_dir() or (names and rel not in names):
                continue
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with wheel.open(info) as src, open(path, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
            written += 1
    if written == 0 or (names and written != len(names)):
        sys.exit(f"fetch_wheel: {url} has not the files asked for under {prefix}")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.rename(tmp, dest)


if __name__ == "__main__":
    main()
