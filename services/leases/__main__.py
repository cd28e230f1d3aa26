from services.dependent import main
from services.leases.app import create_app

main(create_app)
