#!/usr/bin/env python3
"""What the containers of a host node's containerd left on the machine (hack/host-node.sh).

Reads the task bundles in the directory given (containerd's state/io.containerd.runtime.v2.task/
k8s.io) and prints, one per line: "id ID" for each container, "socket PATH" for the socket of its
shim in /run/containerd/s, "netns PATH" for a pod sandbox's network namespace and "cgroup PATH" for
its cgroup. It needs neither containerd nor the kubelet to be running, so that teardown also
works after they died.
"""
import glob
import json
import os
import sys

for config in glob.glob(os.path.join(sys.argv[1], "*", "config.json")):
    bundle = os.path.dirname(config)
    print("id", os.path.basename(bundle))
    try:
        with open(os.path.join(bundle, "address")) as f:
            address = f.read().strip()
        if address.startswith("unix:///run/containerd/s/"):
            print("socket", address[len("unix://"):])
    except OSError:
        pass
    try:
        with open(config) as f:
            linux = json.load(f).get("linux", {})
    except (OSError, ValueError):
        continue
    for ns in linux.get("namespaces", []):
        path = ns.get("path", "")
        if ns.get("type") == "network" and path.startswith(("/var/run/netns/", "/run/netns/")):
            print("netns", path)
    if linux.get("cgroupsPath", "").startswith("/"):
        print("cgroup", linux["cgroupsPath"])
