"""Kubernetes manifests for the whole service (`trtkit deploy k8s`), built as plain dicts from the config.

plan.py resolves the config's ``k8s`` section; pods.py, triton.py, multinode.py, gateway.py and
autoscaling.py build one kind of object each; manifests.py orders and writes them.
"""

from trtkit.k8s.manifests import render_manifests, write_manifests
from trtkit.k8s.plan import K8sPlan, Overrides, make_plan

__all__ = ["K8sPlan", "Overrides", "make_plan", "render_manifests", "write_manifests"]
