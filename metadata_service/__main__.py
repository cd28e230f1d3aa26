import os

from metadata_service.app import create_app
from stormcore.settings import LabSettings
from stormcore.web import serve

serve(
    create_app(LabSettings.from_env(), cell=int(os.environ.get("STORMLAB_CELL", "0"))),
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ.get("STORMLAB_PORT", "8700")),
)
