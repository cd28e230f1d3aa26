from services.dependent import main
from services.metrics.app import create_app

main(create_app)
