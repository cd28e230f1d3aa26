import os

from metadata_service.app import SERVICE, create_app
from metadata_service.front import front_door
from stormcore.settings import LabSettings
from stormcore.web import serve

app = create_app(LabSettings.from_env(), cell=int(os.environ.get("STORMLAB_CELL", "0")))
serve(
    app,
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ.get("STORMLAB_PORT", "8700")),
    front=front_door(app[SERVICE]),
)
