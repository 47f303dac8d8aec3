# /etc/jupyterhub/jupyterhub_config.py: what jupyter-edt adds to the Hub's configuration
c = get_config()  # noqa: F821

# The service's token, from the file its systemd unit reads (JUPYTERHUB_API_TOKEN=...)
with open("/etc/jupyter-edt/token.env") as env:
    edt_token = env.read().strip().removeprefix("JUPYTERHUB_API_TOKEN=")
# Prometheus' token, from the file Prometheus reads (prometheus.yml's credentials_file)
with open("/etc/prometheus/jupyterhub.token") as token:
    prometheus_token = token.read().strip()

c.JupyterHub.services = [
    {
        "name": "edt",
        "url": "http://127.0.0.1:8765",
        "api_token": edt_token,
        "display": True,
        # or Hub-managed: "command": ["/opt/jupyter-edt/venv/bin/jupyter", "edt", "serve",
        #                             "--config=/etc/jupyter-edt/edt_config.py"],
    },
    # scrapes the Hub's /hub/metrics and the service's metrics, and may do nothing else
    {"name": "prometheus", "api_token": prometheus_token},
]
c.JupyterHub.load_roles = [
    # users may use the service (keep "self": it is the default user role)
    {"name": "user", "scopes": ["self", "access:services!service=edt"]},
    {"name": "metrics", "services": ["prometheus"], "scopes": ["read:metrics"]},
]
c.JupyterHub.load_groups = {"edt-admins": {"users": ["carol"]}}

# each user's server forwards to the service, with a token that may
c.Spawner.environment = {"EDT_SERVICE_URL": "http://127.0.0.1:8765/services/edt/"}
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    "access:services!service=edt",
]
