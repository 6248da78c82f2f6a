"""The second article's URL-shortener service, as published there (Flask,
SQLite with its page cache turned off, optional Valkey), put in one file so
that `litelink stress` can be measured against it on the same machine.

Changes from the article, none of them on the request path: the Valkey
cache switch (`kv_cache`), the Valkey port, the database path and the HTTP
port come from the environment instead of being edited in the source.
"""
import os
import random
import sqlite3
import string
import threading

import valkey
from flask import Flask, jsonify, request

DB = os.environ.get("ARTICLE_DB", "database.db")
kv_cache = os.environ.get("ARTICLE_KV_CACHE", "0") == "1"

_thread_local = threading.local()
kv_pool = valkey.ConnectionPool(
    host="localhost",
    port=int(os.environ.get("ARTICLE_VALKEY_PORT", "6379")),
    db=0,
    max_connections=50,
    socket_keepalive=True,
    socket_connect_timeout=5,
    retry_on_timeout=True,
    decode_responses=True,
)

conn = sqlite3.connect(DB)
cur = conn.cursor()
cur.execute("CREATE TABLE IF NOT EXISTS links (id INTEGER PRIMARY KEY, link_hash TEXT, link_target TEXT)")
cur.execute("CREATE INDEX IF NOT EXISTS idx_links_id ON links (id)")
cur.execute("CREATE INDEX IF NOT EXISTS idx_links_link_hash ON links (link_hash)")
conn.commit()
conn.close()


def get_db_connection():
    if not hasattr(_thread_local, "conn"):
        _thread_local.conn = sqlite3.connect(DB, check_same_thread=False)
        _thread_local.conn.execute("PRAGMA cache_size = 0")
        _thread_local.conn.execute("PRAGMA temp_store = 0")
    return _thread_local.conn


def get_kv_db():
    if not hasattr(_thread_local, "kv_db"):
        _thread_local.kv_db = valkey.Valkey(connection_pool=kv_pool)
    return _thread_local.kv_db


def generate_hash():
    return "".join(random.choices(string.ascii_letters + string.digits, k=10))


def generate_new_link(link):
    conn = get_db_connection()
    cur = conn.cursor()
    link_hash = generate_hash()
    cur.execute("INSERT INTO links (link_hash, link_target) VALUES (?, ?)", (link_hash, link))
    conn.commit()
    return link_hash


def get_link_by_hash_string(hash):
    if kv_cache:
        cached = get_kv_db().get(hash)
        if cached:
            return cached
    conn = get_db_connection()
    cur = conn.cursor()
    cur.execute("SELECT link_target FROM links WHERE link_hash = ?", (hash,))
    result = cur.fetchone()
    if result and result[0]:
        if kv_cache:
            get_kv_db().set(hash, result[0])
        return result[0]
    return None


app = Flask(__name__)


@app.route("/heart-beat", methods=["GET"])
def heart_beat():
    return {"OK": True}


@app.route("/link", methods=["POST"])
def create_link():
    data = request.get_json(silent=True) or {}
    url = data.get("url")
    if not url:
        return jsonify({"error": "Campo 'url' é obrigatório."}), 400
    return {"short_link": generate_new_link(url)}, 201


@app.route("/link/<string:short_link>", methods=["GET"])
def get_original_link(short_link):
    original_url = get_link_by_hash_string(short_link)
    if not original_url:
        return jsonify({"error": "Link não encontrado."}), 404
    return {"link": original_url}, 200


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ.get("ARTICLE_PORT", "5000")))
