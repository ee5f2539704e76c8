"""A small, general bilingual lexicon of customer-service and workplace concepts.

Each line is one concept: English words (stemmed like core.text does) and Chinese words that
mean roughly the same. A word found in a card or a message also yields the concept's token
(`@n`), so "money back" meets "refund" and "退款", and "ran out" meets "expired". It is a
thesaurus, not a list of skills: nothing in it names a skill or a bundle, and a bundle routes
without it (it only adds recall for paraphrases). Multi-word English entries are matched as
stemmed word pairs.
"""

GROUPS = """
refund reimburse reimbursement repay repaid payback money-back refunds 退款 退钱 返还 退回 原路返回 报销
charge charged fee billed bill payment debit transaction 扣款 扣费 费用 收费 账单 消费
dispute contest fraud fraudulent unauthorized unauthorised stolen scam chargeback 盗刷 申诉 诈骗 冒用 被盗
card visa mastercard amex paypal bank 银行卡 信用卡 卡
expire expired expiry outdated lapsed 过期 到期
invoice receipt bill statement 发票 收据 票据 单据
tax vat 税号 税 抬头
cancel cancellation stop abort withdraw 取消 撤销 不要了 别发
return send-back 退货 寄回 退回去
exchange swap replace replacement switch 换货 换 更换 调换
size small large bigger smaller xl fit 尺码 码 大号 小号 合身
order purchase bought buy checkout 订单 下单 购买 买
status progress confirmed processing packed 状态 进度 处理 确认
coupon voucher promo discount code 优惠券 折扣 满减 券 优惠
parcel package shipment box delivery courier carrier 包裹 快递 物流 箱子 货
where location whereabouts track tracking 哪里 到哪 位置 跟踪 查询
lost missing never-arrived gone vanished disappeared stuck 丢 丢件 丢失 不见 没收到 没到
damage damaged broken smashed cracked shattered pieces dented 破损 坏了 碎 裂 摔坏
address home office redirect 地址 收货地址 住址 公司
time long days eta when arrive 多久 几天 时间 什么时候 到货
pickup collect fetch grab driver 取件 上门 来拿 揽收
password login log-in sign-in credentials passcode 密码 登录 登陆
lock locked blocked suspended frozen attempts tries 锁 锁定 冻结 封号
two-factor 2fa authenticator otp verification code 两步验证 验证码 双重验证
profile email phone number contact details 手机号 邮箱 电话 资料 信息
delete erase remove wipe close 删除 注销 删掉 清除
newsletter marketing promotional promo spam unsubscribe 广告 推销 营销 退订
crash crashes freeze freezes hang closes shuts quits 闪退 卡死 崩溃 退出
wifi internet network connect connection offline online 网络 联网 连网 网 wifi 连不上
firmware update upgrade version latest software 固件 升级 更新 版本 新版本
setup set-up install pair configure unbox 设置 配对 安装 激活
battery charge charging drain drains power dies 电池 电量 没电 充电 耗电
warranty guarantee repair fix free covered defect faulty 保修 维修 修 免费 质保
leave vacation holiday day-off off time-off 请假 假 假期 休假 年假
balance remaining left 剩余 剩下 还有 还剩
salary pay payslip wage paid deduction 工资 薪水 工资条 扣款 到手
expense expenses taxi cab travel costs meal 报销 差旅 打车 餐费 费用
onboarding start starting new hire joining first day 入职 新员工 第一天 报到
benefit benefits insurance health dental pension coverage 福利 保险 医疗 五险一金 社保
vpn remote network home 远程 内网 公司网络
software program app application license 软件 程序 许可证 应用
laptop computer pc hardware machine 电脑 笔记本 硬件
access permission rights folder drive grant 权限 访问 开通 共享盘
email mail mailbox outlook inbox 邮件 邮箱
phishing suspicious weird fake link 钓鱼 可疑 诈骗 链接
recommend suggest best choose which 推荐 建议 哪款 哪个好 选
quote price pricing cost costs bulk units seats 报价 价格 多少钱 批量
stock available availability sold restock have 有货 缺货 库存 现货
demo demonstration show walkthrough presentation 演示 展示 试用
plan tier subscription membership premium pro 套餐 会员 订阅 计划
downgrade upgrade cheaper expensive 降级 升级 便宜 贵
renewal renew recurring monthly auto-renew 续费 自动续费 续 每月
data information info personal gdpr export copy 数据 资料 个人信息 导出
terms conditions contract agreement policy liability 条款 协议 合同 规定
abuse harassment threatening threat bully report 骚扰 威胁 举报 辱骂
copyright stolen reposting copied permission photos drawings 版权 侵权 盗用 盗图
age id identity underage verify 年龄 实名 身份 认证 身份证
cookie cookies tracking consent 追踪 跟踪
flight fly plane ticket airline 航班 机票 飞机 飞
reschedule rebook move change 改签 改期 更改
hotel room stay accommodation sleep night nights 酒店 住宿 住 房间 一晚
baggage luggage suitcase bag bags carry-on 行李 箱子 托运
visa passport entry enter 签证 护照 入境 手续
insurance insured covered ill sick medical 保险 意外险 生病 医疗
search find look-up lookup query google browse 搜索 查找 查 搜 查询 找
summarize summarise summary tldr recap digest condense 总结 摘要 概括 归纳 汇总
translate translation translator english chinese language 翻译 译 英文 中文 语言
write draft compose rewrite edit proofread polish wording 写 撰写 起草 改写 润色 修改 文案
code program script function bug debug error exception traceback stack 代码 程序 脚本 函数 报错 调试 异常 错误 bug
test tests unit-test pytest coverage 测试 单元测试 覆盖率
deploy deployment release rollout ship production server 部署 发布 上线 服务器 生产
database sql table query schema postgres mysql 数据库 表 查询 sql
chart graph plot visualize visualise dashboard diagram 图表 画图 可视化 折线图 柱状图 报表
spreadsheet excel csv sheet column row 表格 电子表格 excel 列 行
file document doc pdf attachment upload folder 文件 文档 附件 上传 文件夹
image picture photo screenshot drawing 图片 照片 截图 图像 画
video clip movie 视频 影片
audio voice speech recording transcribe transcript 语音 录音 音频 转写 转文字
meeting calendar schedule appointment invite slot 会议 日程 日历 预约 约 开会
remind reminder alarm notify notification 提醒 闹钟 通知
weather forecast temperature rain 天气 气温 下雨 预报
calculate calculation math compute sum average percent 计算 算 数学 求和 平均 百分比
convert conversion unit currency exchange-rate 换算 转换 汇率 单位
news headline article 新闻 头条 文章
contract legal lawyer law clause 合同 法律 律师 条款
customer client user 客户 用户 顾客
complaint complain unhappy angry feedback 投诉 抱怨 不满 反馈 差评
question ask faq 问题 咨询 常见问题
account login user-name username 账号 账户 用户名
delete remove erase 删除 删掉 移除
create add new make 创建 新建 添加 增加
update change modify edit 更新 修改 更改 变更
cancel stop 取消 停止
price cost fee how-much 价格 费用 多少钱 收费
time date deadline 时间 日期 截止
"""


def _build() -> dict[str, list[str]]:
    from core.text import stem

    table: dict[str, list[str]] = {}
    for number, line in enumerate(GROUPS.strip().splitlines()):
        for term in line.split():
            key = term if not term.isascii() else " ".join(stem(p) for p in term.lower().split("-"))
            table.setdefault(key, []).append(f"@{number}")
    return table


_TABLE: dict[str, list[str]] | None = None
_ENGLISH: dict[str, str] | None = None


_CJK_TERMS: list[str] | None = None


def cjk_terms_in(text: str) -> list[str]:
    """The lexicon's non-English terms found in `text` as substrings, longest first, each once:
    a Chinese phrase meets its concept even where the segmenter cut it differently (寄回去 holds
    寄回; 原路返回 inside 钱能不能原路返回). About 300 substring tests per message."""
    global _CJK_TERMS
    if _CJK_TERMS is None:
        if _TABLE is None:
            concepts([])
        assert _TABLE is not None
        _CJK_TERMS = sorted((t for t in _TABLE if not t.isascii() and len(t) >= 2), key=len, reverse=True)
    if text.isascii():
        return []
    return [term for term in _CJK_TERMS if term in text]


def english_of(words: list[str]) -> list[str]:
    """The English words of the concepts that the non-English `words` belong to, once each
    ("退款" -> "refund reimburse ..."): what the semantic path embeds for a Chinese message,
    since its model knows English only."""
    global _ENGLISH
    if _ENGLISH is None:
        lines = GROUPS.strip().splitlines()
        _ENGLISH = {
            f"@{n}": " ".join(t.replace("-", " ") for t in line.split() if t.isascii()) for n, line in enumerate(lines)
        }
    seen: dict[str, None] = {}
    for token in concepts([w for w in words if not w.isascii()]):
        seen.setdefault(token, None)
    return [_ENGLISH[t] for t in seen if _ENGLISH.get(t)]


def concepts(words: list[str]) -> list[str]:
    """The concept tokens of a word list (single words and adjacent English pairs)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _build()
    out: list[str] = []
    for i, word in enumerate(words):
        out.extend(_TABLE.get(word.lstrip("#"), ()) if not word.startswith("#") else ())
        if i + 1 < len(words):
            out.extend(_TABLE.get(f"{word} {words[i + 1]}", ()))
    return out
