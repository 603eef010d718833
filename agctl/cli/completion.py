"""`agctl completion`: the shell completion script for bash, zsh or fish."""

from __future__ import annotations

import click

from agctl.cli.app import App, json_option, pass_app

SHELLS = ("bash", "zsh", "fish")


def completion_script(shell: str) -> str:
    """The script Click generates for `shell`; completions/ holds the committed copies."""
    from click.shell_completion import get_completion_class

    from agctl.cli import cli

    completer = get_completion_class(shell)
    if completer is None:
        raise click.UsageError(f"unsupported shell {shell!r}")
    return completer(cli, {}, "agctl", "_AGCTL_COMPLETE").source()


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@json_option
@pass_app
def command(app: App, shell: str) -> None:
    """Print the completion script for SHELL.

    It completes commands, options and live values: sessions, slots, checkpoints,
    profiles and models.

    \b
    Install:
      bash:  agctl completion bash > ~/.local/share/bash-completion/completions/agctl
      zsh:   agctl completion zsh > "${fpath[1]}/_agctl"   (then restart zsh)
      fish:  agctl completion fish > ~/.config/fish/completions/agctl.fish

    \b
    Examples:
      eval "$(agctl completion bash)"
      agctl completion fish | source
    """
    script = completion_script(shell)
    if app.json:
        app.emit({"shell": shell, "script": script})
        return
    click.echo(script, nl=False)
