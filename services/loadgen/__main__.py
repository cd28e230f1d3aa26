import os

from services.loadgen.app import create_app
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.web import serve

serve(
    create_app(LabSettings.from_env(), os.environ["STORMLAB_METADATA_URL"], RackUrls.from_env()),
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ["STORMLAB_PORT"]),
)
