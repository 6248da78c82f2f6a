//! Integration tests: the real server on a free port, a real SQLite file in
//! a temporary directory. One test binary, so the build links once.

mod helpers;

mod accounts;
mod analytics;
mod api;
mod cache;
mod cluster;
mod config;
mod connections;
mod deploy;
mod disks;
mod domains;
mod durability;
mod hardening;
mod hot;
mod image;
mod importers;
mod imports;
mod labels;
mod manage;
mod modes;
mod oidc;
mod operations;
mod postgres;
mod process;
mod promises;
mod replica;
mod rules;
mod security;
mod snapshots;
mod stress;
mod tls;
mod tour;
mod users;
mod valkey_server;
mod visits;
mod web;
mod webhooks;
mod yourls;
