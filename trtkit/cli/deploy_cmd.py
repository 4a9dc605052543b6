"""`trtkit deploy`: the Triton model repository (`trtkit deploy [repository] CONFIG --engine DIR --out DIR`,
the default sub-command) and the Kubernetes manifests of the whole service (`trtkit deploy k8s CONFIG --out DIR`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from trtkit.cli.options import ConfigArg

DEFAULT_COMMAND = "repository"


class _DefaultsToRepository(TyperGroup):
    """`trtkit deploy CONFIG ...` without a sub-command name keeps meaning `trtkit deploy repository CONFIG ...`."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


deploy_app = typer.Typer(cls=_DefaultsToRepository, no_args_is_help=True,
                         help="Write what serves a model: the Triton model repository (default: `trtkit deploy CONFIG "
                              "--engine DIR --out DIR`), or Kubernetes manifests (`trtkit deploy k8s`).")

EngineOpt = Annotated[Path, typer.Option("--engine", help="Engine folder (GPU), or a TensorRT-LLM checkpoint / "
                                                           "Hugging Face folder for the CPU reference engine; under "
                                                           "build.backend: pytorch the (unified) Hugging Face checkpoint "
                                                           "or the output of trtkit build.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Repository folder to write, e.g. triton_repo/smollm2-135m.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="latency or throughput; overrides serve.profile.")]
TargetOpt = Annotated[str, typer.Option("--target", help="auto (engines or a GPU -> gpu, weights -> cpu), cpu, gpu, "
                                                         "or trtllm-serve (build.backend: pytorch: trtllm-serve's "
                                                         "YAML and its command line instead of a Triton repository).")]
ENGINE_LABELS = {("tensorrt", "gpu"): "C++ tensorrtllm backend", ("tensorrt", "cpu"): "CPU reference engine",
                 ("pytorch", "gpu"): "LLM-API engine model over tensorrt_llm.LLM (PyTorch backend)",
                 ("pytorch", "cpu"): "LLM-API engine model over the CPU reference engine"}


def deploy(config: ConfigArg, engine: EngineOpt, out: OutOpt, profile: ProfileOpt = None,
           target: TargetOpt = "auto") -> None:
    """Generate the Triton model repository (preprocessing, tensorrt_llm, postprocessing, ensemble, BLS)."""
    from trtkit.config import PROFILES, load_config
    from trtkit.errors import ConfigError
    from trtkit.repository import deploy_repository

    if profile not in (None, *PROFILES):
        raise ConfigError(f"--profile {profile!r} is unknown; use latency or throughput")
    resolved = load_config(config, profile=profile)
    if target == "trtllm-serve":
        from trtkit.repository.deploy import deploy_trtllm_serve
        from trtkit.trtllm_build.report import shell_command

        files = deploy_trtllm_serve(resolved, engine, out)
        typer.echo(f"trtllm-serve config: {files.config_path}")
        typer.echo(f"script: {files.script_path}")
        typer.echo(f"command: {shell_command(files.command)}")
        return
    result = deploy_repository(resolved, engine, out, target=target)
    typer.echo(f"repository: {result.out_dir}")
    typer.echo(f"target: {result.target} ({ENGINE_LABELS[(result.settings.backend, result.target)]})")
    typer.echo(f"models: {', '.join(result.models)}")
    typer.echo("settings:")
    for item in result.implied:
        typer.echo(f"  {item.field} = {item.value}  ({item.reason})")
    s = result.settings
    typer.echo(f"  triton max_batch_size = {s.max_batch_size}; decoupled = {s.decoupled}; "
               f"max_input_len = {s.max_input_len}; max_seq_len = {s.max_seq_len}")


K8sOutOpt = Annotated[Path, typer.Option("--out", help="Folder for the manifests, e.g. k8s/smollm2-135m.")]
NamespaceOpt = Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace; default k8s.namespace "
                                                  "(default).")]
ReplicasOpt = Annotated[int | None, typer.Option("--replicas", min=1, help="Gateway replicas; default "
                                                 "k8s.gateway_replicas (2).")]
ImageOpt = Annotated[str | None, typer.Option("--image", help="Triton TensorRT-LLM image; default k8s.triton_image, "
                                              "else the container the build contract names.")]
GatewayImageOpt = Annotated[str | None, typer.Option("--gateway-image", help="Image with trtkit installed; default "
                                                     "k8s.gateway_image, else trtkit:<version>.")]
MultiNodeOpt = Annotated[bool | None, typer.Option(
    "--multi-node/--single-node", help="Spread each Triton replica over several nodes (a LeaderWorkerSet, one pod "
    "per node, mpirun from the leader). Default: k8s.multi_node, and always when tp x pp exceeds k8s.gpus_per_node.")]
PodMonitorOpt = Annotated[bool | None, typer.Option("--pod-monitor/--no-pod-monitor", help="Also write a PodMonitor "
                                                    "(Prometheus Operator) for Triton's metrics; default k8s.pod_monitor.")]


def k8s(config: ConfigArg, out: K8sOutOpt, namespace: NamespaceOpt = None, replicas: ReplicasOpt = None,
        image: ImageOpt = None, gateway_image: GatewayImageOpt = None, multi_node: MultiNodeOpt = None,
        pod_monitor: PodMonitorOpt = None) -> None:
    """Kubernetes manifests: Triton (GPUs = tp x pp), the gateway, their Services, the queue autoscaler."""
    from trtkit.config import load_config
    from trtkit.k8s import Overrides, make_plan, write_manifests

    overrides = Overrides(namespace=namespace, triton_image=image, gateway_image=gateway_image,
                          gateway_replicas=replicas, multi_node=multi_node, pod_monitor=pod_monitor)
    plan = make_plan(load_config(config), config.read_text(encoding="utf-8"), overrides)
    paths = write_manifests(plan, out)
    layout = (f"LeaderWorkerSet, {plan.nodes_per_replica} pods x {plan.gpus_per_pod} GPUs per replica"
              if plan.multi_node else f"Deployment, {plan.gpus_per_pod} GPU(s) per replica")
    typer.echo(f"triton: {layout}; gateway: {plan.gateway_replicas} replicas; namespace {plan.namespace}")
    for path in paths:
        typer.echo(str(path))
    typer.echo(f"apply: create the Secret {plan.store_secret} (key {plan.store_secret_key}: the store URL) in "
               f"{plan.namespace}, then `kubectl apply -f {out}`", err=True)


def register(app: typer.Typer) -> None:
    deploy_app.command(DEFAULT_COMMAND)(deploy)
    deploy_app.command("k8s")(k8s)
    app.add_typer(deploy_app, name="deploy")
