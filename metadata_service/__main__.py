import os

from common.settings import LabSettings
from common.web import serve
from metadata_service.app import create_app

serve(
    create_app(LabSettings.from_env(), cell=int(os.environ.get("STORMLAB_CELL", "0"))),
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ.get("STORMLAB_PORT", "8700")),
)
