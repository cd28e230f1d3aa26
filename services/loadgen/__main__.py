import os

from common.racks import RackUrls
from common.settings import LabSettings
from common.web import serve
from services.loadgen.app import create_app

serve(
    create_app(LabSettings.from_env(), os.environ["STORMLAB_METADATA_URL"], RackUrls.from_env()),
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ["STORMLAB_PORT"]),
)
