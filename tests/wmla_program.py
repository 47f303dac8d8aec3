"""A WMLA EDT program in the tutorial's style, with the helper files users keep beside it
(``elog.py``, ``emetrics.py``, ``edtcallback.py``), written here from the contract's formats;
and how to pack it as a ``<name>.modelDir.tar``."""

from __future__ import annotations

import io
import tarfile
import textwrap

MAIN = '''
import argparse
import json
import os
import sys
import time

path = os.path.join(os.getenv("FABRIC_HOME"), "libs", "fabric.zip")
sys.path.insert(0, path)
from fabric_model import FabricModel
from edtcallback import EDTLoggerCallback

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import Dataset

dataDir = os.environ.get("DATA_DIR")
model_path = os.environ["RESULT_DIR"] + "/model/saved_model"
tb_directory = os.environ["LOG_DIR"] + "/tb"
DELAY = 0.0


class Digits(Dataset):
    """4 classes of 8x8 images: a bright row at the class's place, plus noise."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.x = torch.randn(n, 1, 8, 8, generator=g) * 0.3
        for i, label in enumerate(self.y.tolist()):
            self.x[i, 0, 2 * label] += 1.0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        time.sleep(DELAY)  # stands for the work of reading a real sample
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(36, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.log_softmax(self.fc1(torch.flatten(x, 1)), dim=1)


def getDatasets():
    return (Digits(64, 1), Digits(32, 2))


def main():
    global DELAY
    parser = argparse.ArgumentParser(description="PyTorch EDT example")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batchsize", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--numWorker", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0)
    args, unknown = parser.parse_known_args()
    print("unknown arguments:", unknown)
    names = ["DATA_DIR", "LOG_DIR", "SAVED_MODEL_DIR", "DLI_EXECID", "DLI_IS_ELASTIC",
             "DLI_WORK_DIR", "RESUME_WEIGHT_PATH", "CUDA_VISIBLE_DEVICES"]
    print("environment:", json.dumps({n: os.environ.get(n) for n in names}))
    DELAY = args.delay
    torch.manual_seed(0)
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    edt_m = FabricModel(
        model, getDatasets, F.nll_loss, optimizer, driver_logger=EDTLoggerCallback()
    )
    edt_m.train(args.epochs, args.batchsize, args.numWorker, checkpoint_freq=1)


if __name__ == "__main__":
    main()
'''

ELOG = """
import os
import time


def _path():
    if os.environ.get("LOG_DIR"):
        return os.path.join(os.environ["LOG_DIR"], "stdout")
    if os.environ.get("JOB_STATE_DIR"):
        return os.path.join(os.environ["JOB_STATE_DIR"], "logs")
    return "/tmp/stdout"


class ELog:
    def __init__(self, subId=None):
        self.subId = subId
        os.makedirs(os.path.dirname(_path()), exist_ok=True)
        self.f = open(_path(), "a")

    @staticmethod
    def open(subId=None):
        return ELog(subId)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.f.close()

    def _write(self, text):
        self.f.write(time.strftime("[%Y-%m-%d %H:%M:%S] ") + text + "\\n")
        self.f.flush()

    def recordText(self, text):
        self._write(text)

    def recordTrain(self, title, iteration, global_steps, loss, accuracy, worker):
        self._write(
            "%s,\\tTimestamp: %d,\\tGlobal steps: %d,\\tIteration: %d,"
            "\\tLoss: %.5f,\\tAccuracy: %.5f"
            % (title, int(time.time() * 1000), global_steps, iteration, loss, accuracy)
        )

    def recordTest(self, title, loss, accuracy, worker):
        self._write(
            "%s,\\tTimestamp: %d,\\tLoss: %.5f,\\tAccuracy: %.5f"
            % (title, int(time.time() * 1000), loss, accuracy)
        )
"""

EMETRICS = """
import json
import os
import time


class EMetrics:
    TEST_GROUP = "test"
    TRAIN_GROUP = "train"
    rindex = 0

    def __init__(self, subId=None):
        self.subId = subId
        self.f = open(os.path.join(os.environ["LOG_DIR"], "evaluation-metrics.txt"), "a")

    @staticmethod
    def open(subId=None):
        return EMetrics(subId)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _typed(value):
        if isinstance(value, int):
            return {"type": 2, "value": str(value)}
        if isinstance(value, float):
            return {"type": 3, "value": str(value)}
        return {"value": str(value)}

    def record(self, group, iteration, values):
        EMetrics.rindex += 1
        meta = {"training_id": os.environ.get("DLI_EXECID"), "time": int(time.time() * 1000),
                "rindex": EMetrics.rindex}
        if self.subId is not None:
            meta["subid"] = self.subId
        line = {
            "meta": meta,
            "grouplabel": group,
            "etimes": {"iteration": self._typed(int(iteration)),
                       "time_stamp": {"value": time.strftime("%Y-%m-%dT%H:%M:%S")}},
            "values": {k: self._typed(v) for k, v in values.items()},
        }
        self.f.write(json.dumps(line) + "\\n")
        self.f.flush()

    def close(self):
        self.f.close()
"""

EDTCALLBACK = """
import json
import os

from callbacks import LoggerCallback
from elog import ELog
from emetrics import EMetrics


class EDTLoggerCallback(LoggerCallback):
    def __init__(self):
        super().__init__()
        self.gs = 0
        self.val = []

    def log_train_metrics(self, loss, acc, completed_batch, worker=0):
        acc = acc / 100.0
        self.gs += 1
        with EMetrics.open() as em:
            em.record(EMetrics.TRAIN_GROUP, completed_batch, {"loss": loss, "accuracy": acc})
        with ELog.open() as log:
            log.recordTrain("Train", completed_batch, self.gs, loss, acc, worker)

    def log_test_metrics(self, loss, acc, completed_batch, worker=0):
        acc = acc / 100.0
        with EMetrics.open() as em:
            em.record(EMetrics.TEST_GROUP, completed_batch, {"loss": loss, "accuracy": acc})
        with ELog.open() as log:
            log.recordTest("Test", loss, acc, worker)
        self.val.append({"steps": self.gs, "loss": loss})

    def on_train_end(self):
        with open(os.path.join(os.environ["RESULT_DIR"], "val_dict_list.json"), "w") as f:
            json.dump(self.val, f)
"""

FILES = {"main.py": MAIN, "elog.py": ELOG, "emetrics.py": EMETRICS, "edtcallback.py": EDTCALLBACK}


def model_dir_tar(folder: str = "mnist", files: dict[str, str] | None = None) -> bytes:
    """A gzip tar of ``folder/<file>`` for each program file: a ``.modelDir.tar``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, source in (files or FILES).items():
            data = textwrap.dedent(source).lstrip().encode()
            info = tarfile.TarInfo(f"{folder}/{name}" if folder else name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def multipart_file(data: bytes, filename: str = "mnist.modelDir.tar") -> dict:
    """jp_fetch keywords for a multipart body with one ``file`` part."""
    boundary = "wmla-test-boundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{filename}"\r\nContent-Type: application/x-tar\r\n\r\n'
    ).encode()
    body += data + f"\r\n--{boundary}--\r\n".encode()
    return {"body": body, "headers": {"Content-Type": f"multipart/form-data; boundary={boundary}"}}
