import os
from pathlib import Path

from storage_node.app import create_app, held_from_env, schedule_origin_from_env
from stormcore.fleet import cell_of
from stormcore.racks import find_cell, rack_from_env, wait_until_up
from stormcore.settings import LabSettings
from stormcore.web import serve

settings = LabSettings.from_env()
rack = rack_from_env(settings.racks)
if os.environ.get("STORMLAB_WAIT_FOR"):  # an engine with no start-up order: the metadata service first
    wait_until_up(os.environ["STORMLAB_WAIT_FOR"])
link = os.environ["STORMLAB_LINK_URL"]
if settings.cells > 1 and os.environ.get("STORMLAB_CELLS_DNS"):  # an engine's cells: the one of them that serves this rack
    link = find_cell(os.environ["STORMLAB_CELLS_DNS"], cell_of(rack, settings))
serve(
    create_app(
        settings,
        rack,
        link,
        Path(os.environ.get("STORMLAB_DATA_DIR", "data")),
        held=held_from_env(os.environ),
        schedule_origin=schedule_origin_from_env(os.environ),
    ),
    os.environ.get("STORMLAB_HOST", "127.0.0.1"),
    int(os.environ["STORMLAB_PORT"]),
)
