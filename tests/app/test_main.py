"""app.main: the server settings (CPU, no model); a real server's stop is in test_main_slow.py."""

from __future__ import annotations

from app.main import launch_kwargs


def test_a_space_listens_on_every_interface_and_a_laptop_on_localhost():
    assert launch_kwargs({"SPACE_ID": "x/y"})["server_name"] == "0.0.0.0"
    local = launch_kwargs({"PORT": "8123"})
    assert (local["server_name"], local["server_port"], local["show_error"]) == ("127.0.0.1", 8123, False)
