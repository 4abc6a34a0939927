#pragma once
// The unauthenticated connections a server holds, in the order it accepted them, bounded in all and
// per source address. When a newcomer finds no room, the server evicts one of them (victim()): a
// flood of connections that never authenticate can delay a key holder but never lock it out, and
// one source cannot fill the table. Authenticated connections are never in it.
#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

namespace hmc::detail {

// The source a "host:port" or "[v6]:port" remote comes from: the address without the port.
inline std::string source_of(const std::string& remote) {
  const auto colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
}

template <class Conn>
class HandshakeTable {
 public:
  HandshakeTable(std::size_t max_total, std::size_t max_per_source)
      : max_total_(max_total), max_per_source_(max_per_source) {}

  // False when limits of zero admit nothing at all.
  bool admits_any() const noexcept { return max_total_ != 0 && max_per_source_ != 0; }

  // The connection to evict so that one more from `source` fits (null when it fits as is): the
  // oldest of `source` when that source is at its cap, else the oldest of all when the table is
  // full or `full` says the server is. Connections that have not sent a whole first frame go
  // before those that have: a flood of idle or dribbling connections never evicts a client that
  // spoke, and among those that spoke the oldest goes.
  std::shared_ptr<Conn> victim(const std::string& source, bool full = false) const {
    auto it = per_source_.find(source);
    if (it != per_source_.end() && it->second >= max_per_source_) return oldest(&source);
    if (entries_.size() >= max_total_ || full) return oldest(nullptr);
    return nullptr;
  }

  // `answerable`: the server may write a refusal to it (e.g. not in the middle of a TLS handshake).
  // `spoke`: it has sent a whole well-formed first frame.
  void add(std::shared_ptr<Conn> c, std::string source, bool answerable, bool spoke) {
    ++per_source_[source];
    entries_.push_back(Entry{c, std::move(source), answerable, spoke});
    index_[c.get()] = std::prev(entries_.end());
  }
  void set_spoke(const std::shared_ptr<Conn>& c) {
    auto it = index_.find(c.get());
    if (it != index_.end()) it->second->spoke = true;
  }
  void set_answerable(const std::shared_ptr<Conn>& c) {
    auto it = index_.find(c.get());
    if (it != index_.end()) it->second->answerable = true;
  }
  bool answerable(const std::shared_ptr<Conn>& c) const {
    auto it = index_.find(c.get());
    return it != index_.end() && it->second->answerable;
  }

  // False when `c` is not in the table (it finished, failed or was evicted before).
  bool remove(const std::shared_ptr<Conn>& c) {
    auto it = index_.find(c.get());
    if (it == index_.end()) return false;
    auto e = it->second;
    if (--per_source_[e->source] == 0) per_source_.erase(e->source);
    index_.erase(it);
    entries_.erase(e);
    return true;
  }

  bool contains(const std::shared_ptr<Conn>& c) const { return index_.count(c.get()) != 0; }

  std::size_t size() const noexcept { return entries_.size(); }
  std::size_t count(const std::string& source) const {
    auto it = per_source_.find(source);
    return it == per_source_.end() ? 0 : it->second;
  }

  template <class F>
  void for_each(F&& f) const {
    for (const auto& e : entries_) f(e.conn);
  }

  void clear() {
    entries_.clear();
    index_.clear();
    per_source_.clear();
  }

 private:
  struct Entry {
    std::shared_ptr<Conn> conn;
    std::string source;
    bool answerable;
    bool spoke;
  };

  // The oldest entry (of `source` when given) that has not spoken, else the oldest one.
  std::shared_ptr<Conn> oldest(const std::string* source) const {
    std::shared_ptr<Conn> first;
    for (const auto& e : entries_) {
      if (source && e.source != *source) continue;
      if (!e.spoke) return e.conn;
      if (!first) first = e.conn;
    }
    return first;
  }

  std::size_t max_total_;
  std::size_t max_per_source_;
  std::list<Entry> entries_;
  std::unordered_map<const Conn*, typename std::list<Entry>::iterator> index_;
  std::unordered_map<std::string, std::size_t> per_source_;
};

}  // namespace hmc::detail
