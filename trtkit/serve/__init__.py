"""Launch and stop a real tritonserver (the pytriton wheel's binary on CPU, the container's on GPU hosts)."""

from trtkit.serve.command import LaunchSpec, build_command
from trtkit.serve.control import stop_recorded_servers
from trtkit.serve.server import TritonServer

__all__ = ["LaunchSpec", "TritonServer", "build_command", "stop_recorded_servers"]
