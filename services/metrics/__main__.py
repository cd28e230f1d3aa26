import os
from pathlib import Path

from common.settings import LabSettings
from common.web import serve
from services.metrics.app import create_app

serve(
    create_app(
        LabSettings.from_env(),
        os.environ["STORMLAB_METADATA_URL"],
        os.environ["STORMLAB_RACK_URLS"].split(","),
        Path(os.environ.get("STORMLAB_DATA_DIR", "data")),
    ),
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ["STORMLAB_PORT"]),
)
