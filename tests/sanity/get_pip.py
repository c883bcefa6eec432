"""pip's bootstrap for ansible-test's sanity environments, offline.

ansible-test creates each sanity test's virtual environment without pip and runs a cached
get-pip script in it, which it downloads from a host that only CI systems reach. `make sanity`
puts this script in that cache instead, beside pip's own wheel fetched from PyPI: pip runs from
its wheel and installs itself, as get-pip does, and the packages come from the package index.
"""
import os
import sys


def main():
    # get-pip's own options, which pip install does not know.
    args = [arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
    # Saved as get_pip_24_2.py for pip 24.2, as ansible-test names its cache.
    version = os.path.splitext(os.path.basename(__file__))[0][len('get_pip_'):].replace('_', '.')
    wheel = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'pip-%s-py3-none-any.whl' % version)
    if not os.path.exists(wheel):
        sys.exit('%s is missing: run make sanity, which fetches it' % wheel)
    sys.path.insert(0, wheel)
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel
    sys.exit(pip_main(['install', '--upgrade', '--force-reinstall'] + args))


if __name__ == '__main__':
    main()
