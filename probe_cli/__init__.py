"""The ``probe`` command: a thin layer over the library, one module per command in ``commands/``.

Modules:
    main        the ``probe`` app: every command module registered, ``ProbeError`` as one ``error:`` line
    __main__    ``python -m probe_cli`` (and ``accelerate launch --module probe_cli``)
    options     a command's options made from its config dataclass; every command's ``--config``
    pairs       the one place that turns "no model given" into the embedded default pair
    console     the one factory for the CLI's rich consoles
    latest      the ``latest`` link beside each new run or report
    commands/   one module per command, each with ``register(app)``
"""
