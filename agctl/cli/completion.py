"""`agctl completion`: the shell completion script for bash, zsh or fish.

The scripts speak Click's completion protocol (`_AGCTL_COMPLETE=<shell>_complete`) but are
agctl's own, so that they do not depend on the installed Click's templates and fix what
those get wrong: Click 8.4.0-8.4.1's fish script cannot read its own output; zsh's
autoloaded function offers nothing on the second TAB; bash and zsh split `--opt=value` and
`model:tag` words (pallets/click#2847, #3502).
"""

from __future__ import annotations

import click

from agctl.cli.app import App, pass_app
from agctl.cli.options import json_option

SHELLS = ("bash", "zsh", "fish")

BASH = r"""_agctl_completion() {
    local IFS=$'\n'
    local response cur words cword
    # Rebuild the words bash split at '=' and ':' (as in --session=ID or model:tag).
    if declare -F _get_comp_words_by_ref >/dev/null; then
        _get_comp_words_by_ref -n =: cur words cword
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    response=$(env COMP_WORDS="${words[*]}" COMP_CWORD=$cword _AGCTL_COMPLETE=bash_complete $1)

    for completion in $response; do
        IFS=',' read type value <<< "$completion"

        if [[ $type == 'dir' ]]; then
            COMPREPLY=()
            compopt -o dirnames
        elif [[ $type == 'file' ]]; then
            COMPREPLY=()
            compopt -o default
        elif [[ $type == 'plain' ]]; then
            COMPREPLY+=($value)
        fi
    done

    # Readline replaces only what follows the last ':'; drop what is already typed.
    if declare -F __ltrim_colon_completions >/dev/null; then
        __ltrim_colon_completions "$cur"
    fi
    return 0
}

_agctl_completion_setup() {
    complete -o nosort -F _agctl_completion agctl
}

_agctl_completion_setup;
"""

ZSH = r"""#compdef agctl

_agctl_completion() {
    local -a completions
    local -a completions_with_descriptions
    local -a response
    (( ! $+commands[agctl] )) && return 1

    response=("${(@f)$(env COMP_WORDS="${words[*]}" COMP_CWORD=$((CURRENT-1)) _AGCTL_COMPLETE=zsh_complete agctl)}")

    # For --option=value Click completes the value: keep '--option=' in front of it.
    local prefix=""
    if [[ $words[CURRENT] == -*=* ]]; then
        prefix="${words[CURRENT]%%=*}="
    fi

    for type key descr in ${response}; do
        if [[ "$type" == "plain" ]]; then
            if [[ "$descr" == "_" ]]; then
                completions+=("$prefix$key")
            else
                completions_with_descriptions+=("$prefix${key//:/\:}":"$descr")
            fi
        elif [[ "$type" == "dir" ]]; then
            _path_files -/
        elif [[ "$type" == "file" ]]; then
            _path_files -f
        fi
    done

    if [ -n "$completions_with_descriptions" ]; then
        _describe -V unsorted completions_with_descriptions -U
    fi

    if [ -n "$completions" ]; then
        compadd -U -V unsorted -a completions
    fi
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    # Autoloaded from $fpath: register for the next TABs too, then complete this one.
    compdef _agctl_completion agctl
    _agctl_completion "$@"
else
    # eval/source/. command: register the function for later.
    compdef _agctl_completion agctl
fi
"""

FISH = r"""function _agctl_completion;
    set -l response (env _AGCTL_COMPLETE=fish_complete COMP_WORDS=(commandline -cp) COMP_CWORD=(commandline -t) agctl);

    for completion in $response;
        set -l metadata (string split "," $completion);

        if test $metadata[1] = "dir";
            __fish_complete_directories $metadata[2];
        else if test $metadata[1] = "file";
            __fish_complete_path $metadata[2];
        else if test $metadata[1] = "plain";
            echo $metadata[2];
        end;
    end;
end;

complete --no-files --command agctl --arguments "(_agctl_completion)";
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def completion_script(shell: str) -> str:
    """The script for `shell`; completions/ holds the committed copies."""
    if shell not in SCRIPTS:
        raise click.UsageError(f"unsupported shell {shell!r}")
    return SCRIPTS[shell]


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
