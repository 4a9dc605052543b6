"""Triton model repository generation: every config.pbtxt built from Triton's ModelConfig protobuf."""

from trtkit.repository.deploy import DeployResult, deploy_repository

__all__ = ["DeployResult", "deploy_repository"]
