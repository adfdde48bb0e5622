"""``python -m hpsearch`` is the ``hpsearch`` command."""

from hpsearch.cli import command

command()
