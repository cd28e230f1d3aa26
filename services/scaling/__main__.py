from services.dependent import main
from services.scaling.app import create_app

main(create_app)
