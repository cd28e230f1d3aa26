from services.console.app import create_app
from services.dependent import main

main(create_app)
