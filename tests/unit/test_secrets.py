"""Secrets stay secret: a runner's JSON lines (a room's game.log, 0644) say where each role's token
file is, never the token; a person at the terminal is shown the tokens to hand out."""

import json

from stormlab.responder.desk import Desk
from stormlab.scenarios import cli as gameday_cli


def test_a_runners_json_lines_name_the_token_files_not_the_tokens(tmp_path, capsys):
    book = Desk(tmp_path, "a game", roles={"database": "tok-database-" + "x" * 20, "queues": "tok-queues-" + "y" * 20})
    gameday_cli.tell_roles(gameday_cli.Say(as_json=True), book)
    line = json.loads(capsys.readouterr().out)
    assert line["event"] == "roles" and line["roles"] == ["database", "queues"] and line["tokens_in"] == str(tmp_path / "game")
    assert "tok-" not in json.dumps(line)
    gameday_cli.tell_roles(gameday_cli.Say(as_json=False), book)  # the organiser's terminal: to hand out
    assert "STORMLAB_ROLE_TOKEN=tok-database-" in capsys.readouterr().out
