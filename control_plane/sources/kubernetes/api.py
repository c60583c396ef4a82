"""A configured client for the Kubernetes API: a kubeconfig file, or the pod's service account."""

from __future__ import annotations

from kubernetes import client, config


def api_client(kubeconfig: str | None) -> client.ApiClient:
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)
