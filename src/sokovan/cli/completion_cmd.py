"""`sokovan completion bash|zsh|fish`: the shell completion script of the whole command tree,
from click's own shell completion (`eval "$(sokovan completion bash)"`)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

PROG = "sokovan"
COMPLETE_VAR = "_SOKOVAN_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash:  eval "$(sokovan completion bash)"   (e.g. in ~/.bashrc)
    zsh:   eval "$(sokovan completion zsh)"    (e.g. in ~/.zshrc)
    fish:  sokovan completion fish > ~/.config/fish/completions/sokovan.fish
    """
    cls = get_completion_class(shell)
    if cls is None:  # click knows every shell of SHELLS; a guard, not a fallback
        raise click.ClickException(f"no completion for {shell}")
    root = ctx.find_root().command
    click.echo(cls(root, {}, PROG, COMPLETE_VAR).source())
