"""Runs the link proxy: ``python -m chaos`` with its ports in the environment."""
import json
import os

from chaos.linkproxy import create_app
from services.common.web import serve

links = {int(rack): (os.environ.get("STORMLAB_HOST", "127.0.0.1"), port)
         for rack, port in json.loads(os.environ["STORMLAB_LINK_PORTS"]).items()}
target = (os.environ.get("STORMLAB_METADATA_HOST", "127.0.0.1"), int(os.environ["STORMLAB_METADATA_PORT"]))
serve(create_app(target, links), os.environ.get("STORMLAB_HOST", "127.0.0.1"), int(os.environ["STORMLAB_PORT"]))
