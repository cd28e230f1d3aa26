from services.dependent import main
from services.queues.app import create_app

main(create_app)
