"""placeholder"""
def add_flags(p):
    pass
def run(args):
    return 0
