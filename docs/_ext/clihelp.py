"""``.. otspec-cli-help:: SUBCOMMAND`` inserts the live ``--help`` text of an otspec subcommand,
so the CLI reference can never drift from the parser."""

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


class CliHelp(SphinxDirective):
    required_arguments = 0
    optional_arguments = 1

    def run(self):
        import argparse

        from otspec.cli import build_parser

        parser = build_parser()
        if self.arguments:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[self.arguments[0]]
        text = parser.format_help()
        return [nodes.literal_block(text, text)]


def setup(app):
    app.add_directive("otspec-cli-help", CliHelp)
    return {"parallel_read_safe": True}
