"""The responder's side: what an on-call player sees and does. The runbook (`stormlab ops`), the
moves each role may make, the alerts that page them, the desk that keeps the game's record and
serves the players' consoles, where those pages are reached (reach), and a role's token."""
