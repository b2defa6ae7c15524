"""Shell completion for `stepgraph`, generated from its argument parser (so it never drifts).

bash: `eval "$(stepgraph completion bash)"`; zsh: `eval "$(stepgraph completion zsh)"` (through
bashcompinit). Completes the commands, each command's options, and file names.
"""

from __future__ import annotations

import argparse

BASH = '''_stepgraph() {
  local cur="${COMP_WORDS[COMP_CWORD]}" cmd="${COMP_WORDS[1]}" opts
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "%(commands)s --help --version" -- "$cur"))
    return
  fi
  case "$cmd" in
%(cases)s
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _stepgraph stepgraph
'''


def commands_and_options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: sorted(s for a in p._actions for s in a.option_strings if s.startswith("--"))
            for name, p in sub.choices.items()}


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    table = commands_and_options(parser)
    cases = "\n".join(f'    {name}) opts="{" ".join(options)}";;' for name, options in table.items())
    bash = BASH % {"commands": " ".join(table), "cases": cases}
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + bash
    return bash
