// Files of JSON records, one a line (metrics.jsonl, events.jsonl): such a file holds whole
// records only. A record is written in one write() (lines from several writers never
// interleave); one that could be written only in part (a full disk) is cut off again before
// the error is thrown; and a file opened for appending first loses an unfinished last line
// (what a crash or an older build left), so the next record never continues a cut one.
#pragma once
#include <string>

namespace loom {

class JsonlFile {
 public:
  // append false: the file starts empty. Throws naming the path when it cannot be opened.
  JsonlFile(std::string path, bool append);
  ~JsonlFile();
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;

  // `record` is one line of JSON without its newline. Throws naming the path and the reason
  // (e.g. "No space left on device") when it cannot be written whole.
  void append(const std::string& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Opens, appends one record and closes (files written now and then, by several processes: an
// unfinished last line is not cut here, as another writer's line may be under way).
void append_jsonl_record(const std::string& path, const std::string& record);

}  // namespace loom
