"""The Jupyter server extension: configuration, and the wiring of jupyter-edt's services."""

from __future__ import annotations

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import Enum, Int, Unicode, default, validate

from . import __version__
from .api import default_handlers
from .scheduling.inventory import Inventory, open_inventory

POLICIES = ("fair-share", "priority", "goodput")


class EDTApp(ExtensionApp):
    """Hosts the GPU inventory (and, as it grows, the allocator and launcher) in Jupyter.

    Every setting below can be given on the command line (`--EDTApp.virtual_gpus=2`) or in a
    `jupyter_server_config.py` (`c.EDTApp.virtual_gpus = 2`).
    """

    name = "jupyter_edt"
    version = __version__
    description = "Elastic distributed training for JupyterLab"
    extension_url = "/lab"
    load_other_extensions = True

    devices = Enum(
        ["auto", "nvml", "virtual"],
        default_value="auto",
        config=True,
        help="""Where devices come from. 'auto' uses the NVIDIA GPUs that NVML reports and
        falls back to virtual GPUs when NVML is absent (no library, no driver, no GPU);
        'nvml' fails instead of falling back; 'virtual' always uses virtual GPUs.""",
    )

    virtual_gpus = Int(
        4,
        config=True,
        help="""Number of virtual GPUs (CPU worker slots) offered when no NVIDIA GPU is used.""",
    )

    policy = Enum(
        list(POLICIES),
        default_value="fair-share",
        config=True,
        help="""GPU allocation policy: 'fair-share' (max-min fair between users, then
        between each user's jobs), 'priority' (higher priority first) or 'goodput'.""",
    )

    database_url = Unicode(
        config=True,
        help="""SQLAlchemy URL of the job store. Defaults to an SQLite file in the Jupyter
        data directory.""",
    )

    inventory: Inventory

    @default("database_url")
    def _default_database_url(self) -> str:
        return f"sqlite:///{jupyter_data_dir()}/jupyter_edt/edt.sqlite"

    @validate("virtual_gpus")
    def _check_virtual_gpus(self, proposal: dict) -> int:
        value = proposal["value"]
        if value < 0:
            raise ValueError(f"EDTApp.virtual_gpus must be 0 or more, got {value}.")
        return value

    def initialize_settings(self) -> None:
        self.inventory = open_inventory(self.devices, self.virtual_gpus, logger=self.log)
        if self.inventory.source == "virtual":
            self.log.info(
                "jupyter-edt: scheduling on %d virtual GPUs (CPU worker slots).",
                self.virtual_gpus,
            )
        else:
            self.log.info("jupyter-edt: scheduling on the NVIDIA GPUs that NVML reports.")

    def initialize_handlers(self) -> None:
        self.handlers.extend(default_handlers)

    async def stop_extension(self) -> None:
        self.inventory.close()


main = launch_new_instance = EDTApp.launch_instance
