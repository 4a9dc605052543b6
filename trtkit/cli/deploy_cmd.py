"""`trtkit deploy`: the Triton model repository (`trtkit deploy [repository] CONFIG --engine DIR --out DIR`,
the default sub-command) and the Kubernetes manifests of the whole service (`trtkit deploy k8s CONFIG --out DIR`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from trtkit.cli.command import Renamed, add_command, group
from trtkit.cli.options import ConfigArg, ProfileOpt

DEFAULT_COMMAND = "repository"
SMOL = "model_configs/smollm2-135m.yaml"
LLAMA = "model_configs/llama3-8b-fp8-h100.yaml"
REPO_EXAMPLES = [
    f'trtkit deploy {SMOL} --engine "$(trtkit convert {SMOL})" --out triton_repo/smollm2-135m',
    f"trtkit deploy {LLAMA} --engine ~/.trtkit/work/llama3-8b-fp8-h100/engines/<build> --out triton_repo/llama3"]
K8S_EXAMPLES = [f"trtkit deploy k8s {LLAMA} --out k8s/llama3",
                f"trtkit deploy k8s {LLAMA} --out k8s/llama3 --gateway-replicas 3 --triton-replicas 2-6 --pod-monitor"]
deploy_app = group("Write what serves a model: the Triton model repository (the default: `trtkit deploy CONFIG "
                   "--engine DIR --out DIR`), Kubernetes manifests (`trtkit deploy k8s`), or NVIDIA Dynamo in Kubernetes (`trtkit "
                   "deploy dynamo`).",
                   examples=REPO_EXAMPLES[:1] + K8S_EXAMPLES[:1], default_command=DEFAULT_COMMAND)

EngineOpt = Annotated[Path, typer.Option("--engine", help="What the engine slot serves: a trtllm-build engine folder "
                                                           "(GPU), or for the CPU reference engine a TensorRT-LLM "
                                                           "checkpoint (trtkit convert's output) or a Hugging Face "
                                                           "folder (config.json + *.safetensors); under build.backend: "
                                                           "pytorch the (unified) Hugging Face checkpoint or the "
                                                           "output of trtkit build.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Repository folder to write, e.g. triton_repo/smollm2-135m.")]
TargetOpt = Annotated[Literal["auto", "cpu", "gpu", "trtllm-serve"], typer.Option(
    "--target", help="auto: engines or a GPU -> gpu, weights -> cpu; trtllm-serve (build.backend: pytorch): "
                     "trtllm-serve's YAML and its command line instead of a Triton repository.")]


def deploy(config: ConfigArg, engine: EngineOpt, out: OutOpt, profile: ProfileOpt = None,
           target: TargetOpt = "auto") -> None:
    """Generate the Triton model repository (preprocessing, tensorrt_llm, postprocessing, ensemble, BLS)."""
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository

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
    typer.echo(f"target: {result.target} ({result.settings.slot.label})")
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
GatewayReplicasOpt = Annotated[int | None, typer.Option("--gateway-replicas", min=1, help="Gateway pods; default "
                                                        "k8s.gateway_replicas (2).", show_default=False)]
TritonReplicasOpt = Annotated[str | None, typer.Option(
    "--triton-replicas", metavar="N|MIN-MAX", help="Triton replicas: N exactly, or the autoscaler's range MIN-MAX; "
    "default k8s.hpa_min_replicas-k8s.hpa_max_replicas (1-4).", show_default=False)]
ImageOpt = Annotated[str | None, typer.Option("--image", help="Triton TensorRT-LLM image; default k8s.triton_image, "
                                              "else the container the build contract names.")]
GatewayImageOpt = Annotated[str | None, typer.Option("--gateway-image", help="Image with trtkit installed; default "
                                                     "k8s.gateway_image, else trtkit:<version>.")]
MultiNodeOpt = Annotated[bool | None, typer.Option(
    "--multi-node/--single-node", help="Spread each Triton replica over several nodes (a LeaderWorkerSet, one pod "
    "per node, mpirun from the leader). Default: k8s.multi_node, and always when tp x pp exceeds k8s.gpus_per_node.")]
PodMonitorOpt = Annotated[bool | None, typer.Option("--pod-monitor/--no-pod-monitor", help="Also write a PodMonitor "
                                                    "(Prometheus Operator) for Triton's metrics; default k8s.pod_monitor.")]


def _replica_range(text: str | None) -> tuple[int, int] | None:
    """--triton-replicas N (exactly N) or MIN-MAX (the autoscaler's range); anything else is a usage error."""
    if text is None:
        return None
    low, _, high = text.partition("-")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        bounds = (0, 0)
    if not 1 <= bounds[0] <= bounds[1]:
        raise typer.BadParameter(f"{text!r}: give N or MIN-MAX with 1 <= MIN <= MAX, e.g. 2 or 2-6",
                                 param_hint="'--triton-replicas'")
    return bounds


def k8s(config: ConfigArg, out: K8sOutOpt, namespace: NamespaceOpt = None,
        gateway_replicas: GatewayReplicasOpt = None, triton_replicas: TritonReplicasOpt = None,
        image: ImageOpt = None, gateway_image: GatewayImageOpt = None, multi_node: MultiNodeOpt = None,
        pod_monitor: PodMonitorOpt = None) -> None:
    """Kubernetes manifests: Triton (GPUs = tp x pp), the gateway, their Services, the queue autoscaler; the
    prometheus-adapter rules go to a sub-folder that `kubectl apply -f DIR` does not read."""
    from trtkit.config import load_config
    from trtkit.k8s import Overrides, make_plan, write_manifests

    overrides = Overrides(namespace=namespace, triton_image=image, gateway_image=gateway_image,
                          gateway_replicas=gateway_replicas, triton_replicas=_replica_range(triton_replicas),
                          multi_node=multi_node, pod_monitor=pod_monitor)
    plan = make_plan(load_config(config), config.read_text(encoding="utf-8"), overrides)
    paths = write_manifests(plan, out)
    layout = (f"LeaderWorkerSet, {plan.nodes_per_replica} pods x {plan.gpus_per_pod} GPUs per replica"
              if plan.multi_node else f"Deployment, {plan.gpus_per_pod} GPU(s) per replica")
    typer.echo(f"triton: {layout}; gateway: {plan.gateway_replicas} replicas; namespace {plan.namespace}")
    for path in paths:
        typer.echo(str(path))
    typer.echo(f"apply: create the Secret {plan.store_secret} (key {plan.store_secret_key}: the store URL) in "
               f"{plan.namespace}, then `kubectl apply -f {out}`; merge {paths[-1]} into prometheus-adapter as its "
               f"header says (it is not applied)", err=True)


DYNAMO_EXAMPLES = ["trtkit deploy dynamo model_configs/smollm2-135m-pytorch.yaml --out k8s/smollm2-dynamo",
                   "trtkit deploy dynamo model_configs/smollm2-135m-pytorch.yaml --out k8s/smollm2-dynamo -n serving"]


def dynamo(config: ConfigArg, out: K8sOutOpt, namespace: NamespaceOpt = None,
           gateway_replicas: GatewayReplicasOpt = None, gateway_image: GatewayImageOpt = None) -> None:
    """NVIDIA Dynamo in Kubernetes: a DynamoGraphDeployment (frontend + TensorRT-LLM workers, aggregated or
    prefill/decode, from the config's `dynamo` section) with trtkit's gateway in front (build.backend: pytorch)."""
    from trtkit.config import load_config
    from trtkit.k8s import Overrides, make_plan
    from trtkit.k8s.dynamo_graph import check_deployable, frontend_url, workers
    from trtkit.k8s.dynamo_manifests import write_dynamo

    resolved = load_config(config)
    check_deployable(resolved)
    plan = make_plan(resolved, config.read_text(encoding="utf-8"),
                     Overrides(namespace=namespace, gateway_image=gateway_image, gateway_replicas=gateway_replicas))
    paths = write_dynamo(plan, resolved, out)
    layout = ", ".join(f"{w.replicas} x {w.type}" for w in workers(resolved))
    typer.echo(f"dynamo: {layout}, router {resolved.dynamo.router_mode}; gateway: {plan.gateway_replicas} replicas "
               f"-> {frontend_url(plan)}")
    for path in paths:
        typer.echo(str(path))
    typer.echo(f"apply: install the Dynamo operator (its CRDs), create the Secret {plan.store_secret} (key "
               f"{plan.store_secret_key}: the store URL) in {plan.namespace}, then `kubectl apply -f {out}`", err=True)


def register(app: typer.Typer) -> None:
    add_command(deploy_app, DEFAULT_COMMAND, deploy, examples=REPO_EXAMPLES)
    add_command(deploy_app, "k8s", k8s, examples=K8S_EXAMPLES, renames=[Renamed("--replicas", "--gateway-replicas")])
    add_command(deploy_app, "dynamo", dynamo, examples=DYNAMO_EXAMPLES)
    app.add_typer(deploy_app, name="deploy")
