"""Game days: scenario files, the runner, the operator runbook (`stormlab ops`), scoring, reports."""
