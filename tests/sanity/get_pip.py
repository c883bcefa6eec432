"""pip's bootstrap for ansible-test's sanity environments, offline.

ansible-test creates each sanity test's virtual environment without pip and runs a cached
get-pip script in it, which it downloads from a host that only CI systems reach. `make sanity`
puts this script in that cache instead, beside pip's own wheel fetched from PyPI: pip runs from
its wheel and installs itself, as get-pip does, and the packages come from the package index.
"""
import glob
import os
import sys


def main():
    # get-pip's own options, which pip install does not know.
    args = [arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
    wheels = glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'pip-*-py3-none-any.whl'))
    if not wheels:
        sys.exit('pip wheel missing beside %s: run make sanity' % __file__)
    sys.path.insert(0, sorted(wheels)[-1])
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel
    sys.exit(pip_main(['install', '--upgrade', '--force-reinstall'] + args))


if __name__ == '__main__':
    main()
