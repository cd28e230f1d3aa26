"""Each incident's own code, as a unit every command reaches through the registry (registry.py):
one package an incident (``dynamodb_2015``, ``aws_2025_10``) beside its declaration in
stormcore/incidents/."""
