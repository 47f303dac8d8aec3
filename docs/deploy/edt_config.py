# /etc/jupyter-edt/edt_config.py: the settings of `jupyter edt serve` (--help-all lists them all)
c = get_config()  # noqa: F821

c.EDTService.database_url = "sqlite:////var/lib/jupyter-edt/edt.sqlite"
c.EDTService.jobs_dir = "/var/lib/jupyter-edt/jobs"  # every user's account must reach it
c.EDTService.job_python = "/opt/jupyter-edt/venv/bin/python"  # and execute this
c.EDTService.policy = "fair-share"
c.EDTService.user_quotas = {"intern1": 1}  # GPUs at once
c.EDTService.group_quotas = {"students": 4}  # all members together
c.EDTService.user_weights = {"alice": 2.0}  # her fair share counts double
c.EDTService.admin_groups = ["edt-admins"]  # see and change everyone's jobs and these settings
