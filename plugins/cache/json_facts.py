# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Cache plugin `torchfleet.cluster.json_facts`: the facts setup learned, one plain JSON file a host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: json_facts
short_description: Cache facts as plain JSON files, read once a run
version_added: 1.0.0
description:
  - One JSON file per host, as C(ansible.builtin.jsonfile) wrote them before ansible-core 2.19,
    the facts themselves, readable by any tool, under the host's own name.
  - ansible-core 2.19 wraps what C(ansible.builtin.jsonfile) stores in an envelope of data tags
    and decodes that envelope again at every lookup of a host's variables, for every task, which
    costs a playbook a large share of its controller CPU (docs/performance.md has the figures).
    This plugin reads each file once a run and keeps what it read.
  - Values come back without data tags, as from any file that is not a template, so they are
    never templated again.
  - The playbooks of this collection and the C(torchfleet) command use it; any
    C(fact_caching_connection) works.
author:
  - torchfleet developers (@torchfleet)
options:
  _uri:
    required: true
    description: Directory in which the files are kept.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_CONNECTION
    ini:
      - key: fact_caching_connection
        section: defaults
    type: path
  _prefix:
    description: Prefix of the files' names.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_PREFIX
    ini:
      - key: fact_caching_prefix
        section: defaults
    type: str
  _timeout:
    default: 86400
    description: Seconds after which a file no longer counts; 0 keeps them forever.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_TIMEOUT
    ini:
      - key: fact_caching_timeout
        section: defaults
    type: integer
"""

import json

from ansible.plugins.cache.jsonfile import CacheModule as JsonFileCacheModule


class CacheModule(JsonFileCacheModule):
    """ansible.builtin.jsonfile without the envelope: a file is read (by jsonfile's own loader) at
    the first lookup of its host in a run, and the facts set in a run are kept as given (the base
    class writes each file whole, through a temporary file)."""

    # Not "persistent" to ansible-core 2.19: that word makes it wrap the plugin in the data-tag
    # envelope and decode it at every lookup. The files persist all the same.
    _persistent = False

    def _dump(self, value, filepath):
        # Tagged values are subclasses of str, int, dict and list, written as those; anything
        # else (a date) as its text.
        with open(filepath, "w", encoding="utf-8") as cached:
            json.dump(value, cached, default=str, sort_keys=True, indent=1)
