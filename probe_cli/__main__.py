"""``python -m probe_cli`` (and ``accelerate launch --module probe_cli``) run the ``probe`` command."""

from probe_cli.main import main

main()
