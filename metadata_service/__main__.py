import os
import sys

from metadata_service.app import SERVICE, create_app
from metadata_service.front import front_door
from stormcore.racks import RackSpecError, cell_from_env
from stormcore.settings import LabSettings
from stormcore.web import serve

settings = LabSettings.from_env()
try:
    cell = cell_from_env(settings.cells)
except RackSpecError as exc:
    sys.exit(f"metadata_service: {exc}")
app = create_app(settings, cell=cell)
serve(
    app,
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ.get("STORMLAB_PORT", "8700")),
    front=front_door(app[SERVICE]),
)
