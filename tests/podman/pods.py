"""Run the containers of the chart's rendered pods with podman, as a kubelet would run them:
the same image, command, args and environment (ConfigMap and Secret resolved), the pod's
user, a read-only root filesystem with only the pod's emptyDirs writable, no capabilities.

Differences from Kubernetes, on purpose: host networking (every container reaches the test's
PostgreSQL and Redis on 127.0.0.1, Service names are mapped to 127.0.0.1), and restarts are
done by the test (`podman start` after a kill is what the kubelet does to a dead container).
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docpipe_dev.localstack import free_port

Obj = dict[str, Any]


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


@dataclass
class Manifests:
    """The rendered objects, with ConfigMap and Secret data at hand."""

    objects: list[Obj]
    configmaps: dict[str, dict[str, str]] = field(init=False)
    secrets: dict[str, dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.configmaps = {
            o["metadata"]["name"]: o.get("data", {})
            for o in self.objects
            if o["kind"] == "ConfigMap"
        }
        self.secrets = {
            o["metadata"]["name"]: {
                k: base64.b64decode(v).decode() for k, v in o.get("data", {}).items()
            }
            for o in self.objects
            if o["kind"] == "Secret"
        }

    def workload(self, kind: str, name: str) -> Obj:
        return next(o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name)

    def environment(self, container: Obj) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            env.update(self.configmaps[source["configMapRef"]["name"]])
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
                continue
            ref = var["valueFrom"].get("secretKeyRef") or var["valueFrom"]["configMapKeyRef"]
            store = self.secrets if "secretKeyRef" in var["valueFrom"] else self.configmaps
            value = store.get(ref["name"], {}).get(ref["key"])
            if value is None:
                assert ref.get("optional"), f"{var['name']}: {ref} is missing"
                continue
            env[var["name"]] = value
        return env

    def podman_run_args(
        self, workload: Obj, container: Obj, *, name: str, files_dir: Path, hosts: list[str]
    ) -> list[str]:
        """`podman run` options + image + argv for one container of ``workload``'s pod."""
        pod = workload["spec"]["template"]["spec"]
        pod_security = pod.get("securityContext", {})
        security = container.get("securityContext", {})
        args = ["--name", name, "--network", "host", "--init=false"]
        args += [f"--add-host={host}:127.0.0.1" for host in hosts]
        if "runAsUser" in pod_security:
            args += ["--user", f"{pod_security['runAsUser']}:{pod_security.get('runAsGroup', 0)}"]
        if security.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        if security.get("capabilities", {}).get("drop") == ["ALL"]:
            args += ["--cap-drop", "ALL"]
        if security.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:
                args += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777,size=64m"]
            elif "configMap" in volume:
                folder = files_dir / volume["configMap"]["name"]
                folder.mkdir(parents=True, exist_ok=True)
                folder.chmod(0o755)
                for key, text in self.configmaps[volume["configMap"]["name"]].items():
                    (folder / key).write_text(text)
                    (folder / key).chmod(0o644)
                args += ["-v", f"{folder}:{mount['mountPath']}:ro"]
            else:
                raise AssertionError(f"volume {volume} has no podman equivalent here")
        env = self.environment(container)
        if any(port.get("name") == "metrics" for port in container.get("ports", [])):
            # One network for all containers: each metrics endpoint needs a port of its own.
            env["DOCPIPE_METRICS_PORT"] = str(free_port())
        for key, value in sorted(env.items()):
            args += ["-e", f"{key}={value}"]
        command = container["command"]
        args += ["--entrypoint", command[0], container["image"], *command[1:]]
        return args + [str(a) for a in container.get("args", [])]
