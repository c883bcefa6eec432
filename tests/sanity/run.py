"""`make sanity`: ansible-test sanity on the collection, offline.

ansible-test wants the collection at a path that ends in ansible_collections/NAMESPACE/NAME, so
the checkout's files (tracked, and new ones git does not ignore) are copied to one under build/.
The copy leaves out .collections/, the checkout's link back to itself (ansible.cfg finds the
collection through it; it is not part of the collection, and galaxy.yml leaves it out too).
Each sanity test runs in a virtual environment of its own, which ansible-test bootstraps with
a get-pip script from a host only CI systems reach; get_pip.py stands in for it (see there).
Arguments are passed to ansible-test: `make sanity ARGS='--test pylint'`.
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COPY = REPO / 'build' / 'sanity' / 'ansible_collections' / 'torchfleet' / 'cluster'
PIP_CACHE = Path.home() / '.ansible' / 'test' / 'cache'


def bootstrap_pip():
    """Put pip's wheel and get_pip.py where ansible-test looks for its cached bootstrap."""
    import inspect  # pylint: disable=import-outside-toplevel
    from ansible_test._internal import python_requirements  # pylint: disable=import-outside-toplevel
    version = re.search(r"pip='([^']+)'", inspect.getsource(python_requirements.get_venv_packages)).group(1)
    PIP_CACHE.mkdir(parents=True, exist_ok=True)
    if not list(PIP_CACHE.glob(f'pip-{version}-py3-none-any.whl')):
        subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps', '--dest', str(PIP_CACHE),
                        f'pip=={version}'], check=True)
    shutil.copyfile(Path(__file__).with_name('get_pip.py'), PIP_CACHE / f"get_pip_{version.replace('.', '_')}.py")


def copy_collection():
    files = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard', '-z'], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.split('\0')
    shutil.rmtree(COPY, ignore_errors=True)
    for name in files:
        source = REPO / name
        if not name or name.startswith('.collections/') or not source.exists():
            continue
        target = COPY / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    # A repository of its own: ansible-test lists a collection's files with git, and the copy
    # lies inside the checkout's ignored build/.
    subprocess.run(['git', 'init', '--quiet'], cwd=COPY, check=True)


def main():
    bootstrap_pip()
    copy_collection()
    python = f'{sys.version_info.major}.{sys.version_info.minor}'
    command = [str(Path(sys.executable).with_name('ansible-test')), 'sanity', '--local', '--python', python,
               '--color', 'no'] + sys.argv[1:]
    sys.exit(subprocess.run(command, cwd=COPY, check=False).returncode)


if __name__ == '__main__':
    main()
