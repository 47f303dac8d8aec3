"""``jupyter edt serve``: the job service as a standalone Tornado service, shared by every user
of a machine (the shared mode). It knows nothing of Jupyter servers: callers are identified by
their JupyterHub tokens (`HubAuthenticator`) or by a token file (`TokenFileAuthenticator`), and
each user's Jupyter server forwards its API to it (``api/forward.py``)."""
