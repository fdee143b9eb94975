#pragma once
// RAII over sqlite3* and sqlite3_stmt*, with errors that keep SQLite's result code.
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ejk/error.hpp"

namespace ejk::sqlite {

class Error : public IoError {
 public:
  Error(int code, const std::string& what) : IoError(what), code_(code) {}
  int code() const { return code_; }
  // The file is damaged or not a database at all.
  bool damaged() const {
    int primary = code_ & 0xff;
    return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
  }

 private:
  int code_;
};

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbClose>;

[[noreturn]] inline void fail(sqlite3* db, int rc, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw Error(db ? sqlite3_extended_errcode(db) : rc, msg);
}

inline void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = std::string(sql).substr(0, 60) + ": " + (err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    throw Error(sqlite3_extended_errcode(db), msg);
  }
}

class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql) : db_(db) {
    int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) fail(db, rc, "prepare '" + std::string(sql.substr(0, 60)) + "'");
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, std::string_view v) {
    check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& bind(int i, std::int64_t v) {
    check(sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }
  Stmt& bind(int i, double v) {
    check(sqlite3_bind_double(stmt_, i, v));
    return *this;
  }
  // True while there is a row; false when done. Throws Error.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, rc, "step");
  }
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  std::string text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(db_, rc, "bind");
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE takes the write lock up front, so a transaction never has to upgrade a
// read lock (which SQLite answers with SQLITE_BUSY without waiting). Rolls back unless
// committed.
class Transaction {
 public:
  // `write`: the write lock from the start (BEGIN IMMEDIATE); else a deferred transaction, whose
  // reads all see the database as of the first of them.
  enum Kind { write, read };
  explicit Transaction(sqlite3* db, Kind kind = write) : db_(db) { exec(db, kind == write ? "BEGIN IMMEDIATE" : "BEGIN"); }
  ~Transaction() {
    if (db_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    exec(db_, "COMMIT");
    db_ = nullptr;
  }

 private:
  sqlite3* db_;
};

}  // namespace ejk::sqlite
