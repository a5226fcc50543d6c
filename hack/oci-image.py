#!/usr/bin/env python3
"""Writes an OCI image archive without a container engine (used by hack/build-image.sh).

The image has one layer: the files given with --file (binaries, the shared libraries they load,
CA certificates), /etc/passwd and /etc/group naming the non-root user, and an empty /tmp. Every
tar entry has a fixed owner, mode and modification time (--epoch), entries are sorted and the
layer is gzip-compressed without a name or timestamp, so the same inputs give the same bytes —
and the same digest — on any machine.

Output: an OCI image layout (oci-layout, index.json, blobs/sha256/...) packed as a tar (the
`oci-archive:` transport of skopeo, podman and buildah; `ctr images import` takes it too).
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile


def tar_info(name, epoch, mode, kind=tarfile.REGTYPE, size=0, link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.linkname = link
    return info


def layer(files, user, uid, epoch):
    """The layer tar: {path in image: path on disk}, plus the user's files; sorted entries."""
    entries = {}
    passwd = f"root:x:0:0:root:/root:/sbin/nologin\n{user}:x:{uid}:{uid}:{user}:/nonexistent:/sbin/nologin\n"
    group = f"root:x:0:\n{user}:x:{uid}:\n"
    entries["etc/passwd"] = ("data", passwd.encode(), 0o644)
    entries["etc/group"] = ("data", group.encode(), 0o644)
    entries["tmp"] = ("dir", None, 0o1777)
    for target, source in files.items():
        target = target.lstrip("/")
        mode = os.stat(source).st_mode
        perm = 0o755 if mode & stat.S_IXUSR else 0o644
        with open(source, "rb") as f:
            entries[target] = ("data", f.read(), perm)
    # Parent directories of every entry.
    for path in list(entries):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:i]), ("dir", None, 0o755))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        # The root directory itself (0755), as image builders write it, so that no runtime
        # has to make it up.
        tar.addfile(tar_info("./", epoch, 0o755, tarfile.DIRTYPE))
        for path in sorted(entries):
            kind, data, perm = entries[path]
            if kind == "dir":
                tar.addfile(tar_info(path + "/", epoch, perm, tarfile.DIRTYPE))
            else:
                tar.addfile(tar_info(path, epoch, perm, size=len(data)), io.BytesIO(data))
    return out.getvalue()


def gzip_bytes(data, level):
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=level) as z:
        z.write(data)
    return out.getvalue()


def blob(blobs, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="the OCI archive to write")
    p.add_argument("--file", action="append", default=[], metavar="IMAGE_PATH=HOST_PATH")
    p.add_argument("--user", default="nonroot")
    p.add_argument("--uid", type=int, default=65532)
    p.add_argument("--epoch", type=int, required=True, help="modification time of every file")
    p.add_argument("--entrypoint", help="the default command (none: the chart names the binary)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable besides PATH=/usr/local/bin")
    p.add_argument("--ref", required=True,
                   help="the image's name in the index (org.opencontainers.image.ref.name), e.g."
                   " flotilla.local/etcd:v3.6.16: containerd's 'ctr images import' registers a"
                   " full name like this one as it is")
    p.add_argument("--gzip-level", type=int, default=9, choices=range(1, 10), metavar="1-9",
                   help="compression level of the layer (default 9; 1 is several times faster)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()

    files = dict(f.split("=", 1) for f in args.file)
    tar = layer(files, args.user, args.uid, args.epoch)
    compressed = gzip_bytes(tar, args.gzip_level)
    blobs = {}
    layer_digest = blob(blobs, compressed)
    created = datetime.datetime.fromtimestamp(args.epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{args.uid}:{args.uid}",
            "Env": ["PATH=/usr/local/bin"] + args.env,
            "WorkingDir": "/",
            "Labels": dict(l.split("=", 1) for l in args.label),
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()],
        },
        "history": [{"created": created, "created_by": "hack/build-image.sh"}],
    }
    if args.entrypoint:
        config["config"]["Entrypoint"] = [args.entrypoint]
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = blob(blobs, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(compressed),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = blob(blobs, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {"org.opencontainers.image.ref.name": args.ref},
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    layout = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
    }
    for digest, data in blobs.items():
        layout["blobs/sha256/" + digest.split(":", 1)[1]] = data
    # A temporary file of this process's own: two builds of one archive may run at once.
    tmp = f"{args.output}.{os.getpid()}.tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        for d in ["blobs/", "blobs/sha256/"]:
            out.addfile(tar_info(d, args.epoch, 0o755, tarfile.DIRTYPE))
        for path in sorted(layout):
            data = layout[path]
            out.addfile(tar_info(path, args.epoch, 0o644, size=len(data)), io.BytesIO(data))
    os.replace(tmp, args.output)
    print(json.dumps({"manifest": manifest_digest, "layer_bytes": len(compressed),
                      "uncompressed_bytes": len(tar)}))


if __name__ == "__main__":
    sys.exit(main())
