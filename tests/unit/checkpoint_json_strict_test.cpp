// Json on top of nlohmann-json: the rules Loom adds to its parser (no byte order mark, nothing
// after the value, duplicate keys, the nesting limit), positions of errors that its lexer
// finds before its parser, integers beyond int64, and a dump byte for byte as files hold it.
#include <gtest/gtest.h>

#include "expect_error.h"

#include <string>

#include "loom/core/json.h"

namespace {

using loom::Json;

TEST(JsonStrict, NothingBeforeOrAfterTheValue) {
  expect_error([] { Json::parse("\xef\xbb\xbf{}"); }, {"line 1, column 1", "byte 0xef"});
  expect_error([] { Json::parse(std::string("{}\0", 3)); },
               {"column 3", "expected end of input after the top-level value, got byte 0x00"});
  expect_error([] { Json::parse(std::string("1\0", 2)); }, {"column 2", "end of input after"});
  expect_error([] { Json::parse(std::string("[1,\0]", 5)); }, {"column 4", "a value"});
  expect_error([] { Json::parse("/* no comments */ 1"); }, {"column 1", "a value"});
}

TEST(JsonStrict, DuplicateKeysAreFoundAtEveryDepth) {
  expect_error([] { Json::parse(R"({"a": {"b": 1, "b": 2}})"); },
               {"line 1, column 16", "key 'b' repeats"});
  expect_error([] { Json::parse(R"({"": [], "": {}})"); }, {"column 10", "key '' repeats"});
  EXPECT_NO_THROW(Json::parse(R"({"a": {"a": 1}, "b": {"a": 2}})"));  // same key, two objects
}

TEST(JsonStrict, NestingLimitCountsObjectsAndArrays) {
  const auto nested = [](int depth) {
    std::string text;
    for (int i = 0; i < depth; ++i) text += i % 2 ? "[" : "{\"k\":";
    text += "0";
    for (int i = depth - 1; i >= 0; --i) text += i % 2 ? "]" : "}";
    return text;
  };
  EXPECT_NO_THROW(Json::parse(nested(512)));
  expect_error([&] { Json::parse(nested(513)); }, {"at most 512 levels of nesting"});
}

TEST(JsonStrict, BadTokenWhereNoneMayComeIsReportedAsThat) {
  // The lexer reads the whole token first; the error is that a token comes there at all.
  expect_error([] { Json::parse("[1 -]"); }, {"column 4", "',' or ']' in array, got '-'"});
  expect_error([] { Json::parse("{-1: 2}"); }, {"column 2", "a string key or '}', got '-'"});
  expect_error([] { Json::parse("1 \"\xff\""); }, {"column 3", "end of input after"});
  expect_error([] { Json::parse(R"({"a" "\x"})"); }, {"column 6", "':' after key 'a'"});
  expect_error([] { Json::parse("[1, tru]"); }, {"column 5", "expected 'true', got 'tru'"});
  expect_error([] { Json::parse("[true false]"); }, {"column 7", "',' or ']'"});
  expect_error([] { Json::parse("[\"\\ud83d\\u0041\"]"); }, {"column 9", "low surrogate"});
  expect_error([] { Json::parse("[-1e999]"); }, {"column 2", "range of a double"});
}

TEST(JsonStrict, IntegersBeyondInt64AreDoubles) {
  const Json v = Json::parse("[18446744073709551615, -9223372036854775809, -0, 0]");
  EXPECT_TRUE(v.at(0).is_double());
  EXPECT_EQ(v.at(0).as_double(), 18446744073709551615.0);
  EXPECT_TRUE(v.at(1).is_double());
  EXPECT_EQ(v.at(1).as_double(), -9223372036854775809.0);
  EXPECT_TRUE(v.at(2).is_int());
  EXPECT_EQ(v.at(2).as_int(), 0);
  EXPECT_EQ(v.dump(), "[18446744073709551616.0,-9223372036854775808.0,0,0]");
}

TEST(JsonStrict, ParsedValuesAreNamedForErrors) {
  const Json v = Json::parse(R"({"m": [[1, "x"]], "o": {"n": {}}})");
  expect_error([&] { v.at("m").at(0).at(1).as_int(); }, {"key 'm[0][1]' is a string"});
  expect_error([&] { v.at("o").at("n").as_array(); }, {"key 'n' is an object"});
}

TEST(JsonStrict, DumpIsByteForByteWhatFilesHold) {
  // The same bytes as before nlohmann: std::to_chars' shortest doubles (3e-04, not 0.0003;
  // 4.1752050594835e+78, where Grisu2 would add a 17th digit), Loom's layout.
  const Json doc = Json::object({{"lr", 3e-4},
                                 {"big", 1e14},
                                 {"int_like", 123456789012345680.0},
                                 {"hundred", 100.0},
                                 {"neg_zero", -0.0},
                                 {"tiny", 5e-324},
                                 {"grisu", 4.1752050594835e+78},
                                 {"ints", Json::array({int64_t(-9223372036854775807LL - 1), 42})},
                                 {"text", "tab\t\xc3\xa9 \x7f /"},
                                 {"empty", Json::object()},
                                 {"none", Json::array()}});
  EXPECT_EQ(doc.dump(),
            R"({"lr":3e-04,"big":1e+14,"int_like":123456789012345680.0,"hundred":100.0,)"
            R"("neg_zero":-0.0,"tiny":5e-324,"grisu":4.1752050594835e+78,)"
            R"("ints":[-9223372036854775808,42],"text":"tab\t)"
            "\xc3\xa9 \x7f /"
            R"(","empty":{},"none":[]})");
  EXPECT_EQ(Json::object({{"a", Json::array({1.5, Json::object({{"b", nullptr}})})}}).dump(0),
            "{\n\"a\": [\n1.5,\n{\n\"b\": null\n}\n]\n}");
  EXPECT_EQ(Json::parse(doc.dump(2)), doc);
}

TEST(JsonStrict, BytesThatAreNotUtf8AreWrittenAsReplacementCharacters) {
  // Never JSON that parse() would refuse: a damaged name in a log line reads back.
  const Json v = Json::object({{"bad\xff", "a\xc3"}});
  EXPECT_EQ(v.dump(), "{\"bad\xef\xbf\xbd\":\"a\xef\xbf\xbd\"}");
  EXPECT_EQ(Json::parse(v.dump()).items()[0].first, "bad\xef\xbf\xbd");
}

}  // namespace
